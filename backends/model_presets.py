"""Named model presets for the KV planner: the fields of each model's published ``config.json``.

``kvgate plan llama-3-70b`` needs no download: the preset holds the attention geometry that
``backends.kv.geometry`` reads from a real ``config.json``, copied from the model's Hugging Face
repository (source named per preset), plus a published parameter count where the config alone
does not give one (mixture-of-experts models). Values are read-only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Preset:
    """A model's ``config.json`` fields, its parameter count when known, and where they come from."""

    config: Mapping[str, object]
    params: int | None
    source: str


def _preset(source: str, params: int | None = None, **config: object) -> Preset:
    return Preset(MappingProxyType(config), params, source)


_LLAMA3_70B = dict(model_type="llama", hidden_size=8192, num_attention_heads=64, num_key_value_heads=8,
                   num_hidden_layers=80, intermediate_size=28672, vocab_size=128256,
                   tie_word_embeddings=False, torch_dtype="bfloat16")
_LLAMA3_8B = dict(model_type="llama", hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                  num_hidden_layers=32, intermediate_size=14336, vocab_size=128256,
                  tie_word_embeddings=False, torch_dtype="bfloat16")
_DEEPSEEK_V3 = dict(model_type="deepseek_v3", hidden_size=7168, num_attention_heads=128,
                    num_key_value_heads=128, num_hidden_layers=61, kv_lora_rank=512, q_lora_rank=1536,
                    qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, vocab_size=129280,
                    n_routed_experts=256, max_position_embeddings=163840, torch_dtype="bfloat16")

PRESETS: Mapping[str, Preset] = MappingProxyType({
    "llama-3-70b": _preset("meta-llama/Meta-Llama-3-70B", max_position_embeddings=8192, **_LLAMA3_70B),
    "llama-3.1-70b": _preset("meta-llama/Llama-3.1-70B", max_position_embeddings=131072, **_LLAMA3_70B),
    "llama-3-8b": _preset("meta-llama/Meta-Llama-3-8B", max_position_embeddings=8192, **_LLAMA3_8B),
    "llama-3.1-8b": _preset("meta-llama/Llama-3.1-8B", max_position_embeddings=131072, **_LLAMA3_8B),
    "qwen2.5-7b": _preset(
        "Qwen/Qwen2.5-7B-Instruct", model_type="qwen2", hidden_size=3584, num_attention_heads=28,
        num_key_value_heads=4, num_hidden_layers=28, intermediate_size=18944, vocab_size=152064,
        max_position_embeddings=32768, sliding_window=131072, use_sliding_window=False,
        tie_word_embeddings=False, torch_dtype="bfloat16"),
    "mistral-7b-v0.3": _preset(
        "mistralai/Mistral-7B-Instruct-v0.3", model_type="mistral", hidden_size=4096,
        num_attention_heads=32, num_key_value_heads=8, num_hidden_layers=32, head_dim=128,
        intermediate_size=14336, vocab_size=32768, max_position_embeddings=32768,
        sliding_window=None, tie_word_embeddings=False, torch_dtype="bfloat16"),
    "smollm2-135m": _preset(
        "HuggingFaceTB/SmolLM2-135M-Instruct", model_type="llama", hidden_size=576,
        num_attention_heads=9, num_key_value_heads=3, num_hidden_layers=30, intermediate_size=1536,
        vocab_size=49152, max_position_embeddings=8192, tie_word_embeddings=True, torch_dtype="bfloat16"),
    "deepseek-v3": _preset("deepseek-ai/DeepSeek-V3", 671_000_000_000, **_DEEPSEEK_V3),
    "deepseek-r1": _preset("deepseek-ai/DeepSeek-R1", 671_000_000_000, **_DEEPSEEK_V3),
    "deepseek-v2-lite": _preset(
        "deepseek-ai/DeepSeek-V2-Lite", 15_700_000_000, model_type="deepseek_v2", hidden_size=2048,
        num_attention_heads=16, num_key_value_heads=16, num_hidden_layers=27, kv_lora_rank=512,
        q_lora_rank=None, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
        vocab_size=102400, n_routed_experts=64, max_position_embeddings=163840, torch_dtype="bfloat16"),
})
"""Preset name -> :class:`Preset`."""
