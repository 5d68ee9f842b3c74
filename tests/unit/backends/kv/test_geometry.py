"""backends.kv.geometry: MHA/GQA/MLA from config.json, presets, and refusals (never guesses)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backends.errors import UnsupportedModelError
from backends.kv.geometry import AttentionKind, geometry_from_config, load_geometry, weights_bytes_on_disk
from backends.model_presets import PRESETS

LLAMA_LIKE = dict(model_type="llama", hidden_size=4096, num_attention_heads=32, num_key_value_heads=8,
                  num_hidden_layers=32, intermediate_size=14336, vocab_size=128256)

KINDS = [
    ("gqa", LLAMA_LIKE, AttentionKind.GQA, 32, 8, 128),
    ("mha-no-kv-heads", dict(LLAMA_LIKE, num_key_value_heads=None), AttentionKind.MHA, 32, 32, 128),
    ("mqa-falcon", dict(model_type="falcon", hidden_size=4544, n_head=71, n_layer=32, multi_query=True),
     AttentionKind.GQA, 32, 1, 64),
    ("gpt2-names", dict(model_type="gpt2", n_embd=768, n_head=12, n_layer=12), AttentionKind.MHA, 12, 12, 64),
    ("explicit-head-dim", dict(LLAMA_LIKE, head_dim=96), AttentionKind.GQA, 32, 8, 96),
    ("qwen-sliding-window-off", dict(LLAMA_LIKE, sliding_window=131072, use_sliding_window=False),
     AttentionKind.GQA, 32, 8, 128),
    ("mla-deepseek-v2-lite", dict(PRESETS["deepseek-v2-lite"].config), AttentionKind.MLA, 27, 1, 576),
    ("multimodal-text-config", dict(model_type="llava", text_config=dict(LLAMA_LIKE)), AttentionKind.GQA, 32, 8, 128),
    ("layer-types-all-full", dict(LLAMA_LIKE, layer_types=["full_attention"] * 32), AttentionKind.GQA, 32, 8, 128),
]


@pytest.mark.parametrize(("config", "kind", "layers", "kv_heads", "head_dim"), [k[1:] for k in KINDS],
                         ids=[k[0] for k in KINDS])
def test_attention_kinds(config: dict, kind: AttentionKind, layers: int, kv_heads: int, head_dim: int) -> None:
    g = geometry_from_config(config, "m")
    assert (g.attention, g.num_layers, g.num_kv_heads, g.head_dim) == (kind, layers, kv_heads, head_dim)


REFUSED = [
    ("sliding-window", dict(LLAMA_LIKE, model_type="mistral", sliding_window=4096), "sliding-window attention"),
    ("gemma-layer-types", dict(LLAMA_LIKE, layer_types=["sliding_attention", "full_attention"]),
     "layers other than full attention: sliding_attention"),
    ("mamba", dict(model_type="mamba", hidden_size=768, num_hidden_layers=24), "state-space or hybrid"),
    ("jamba-keys", dict(LLAMA_LIKE, model_type="custom", layers_block_type=["mamba", "attention"]), "hybrid"),
    ("qwen3-next", dict(LLAMA_LIKE, model_type="qwen3_next"), "state-space or hybrid"),
    ("t5", dict(model_type="t5", d_model=512, num_heads=8, num_layers=6, is_encoder_decoder=True), "encoder-decoder"),
    ("llama4-chunked", dict(LLAMA_LIKE, attention_chunk_size=8192), "chunked local attention"),
    ("gemma3n-kv-sharing", dict(LLAMA_LIKE, num_kv_shared_layers=10), "KV shared across layers"),
    ("deepseek-v32-indexer", dict(PRESETS["deepseek-v3"].config, index_topk=2048), "sparse attention"),
    ("no-layers", dict(model_type="x", hidden_size=64, num_attention_heads=4), "no positive integer num_hidden_layers"),
    ("mla-without-rope", dict(LLAMA_LIKE, kv_lora_rank=512), "qk_rope_head_dim"),
    ("bad-kv-heads", dict(LLAMA_LIKE, num_key_value_heads=5), "does not divide"),
    ("bad-head-dim", dict(LLAMA_LIKE, hidden_size=1000, num_attention_heads=3, num_key_value_heads=1), "no head_dim"),
]


@pytest.mark.parametrize(("config", "reason"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_unsupported_models_are_refused_with_the_reason(config: dict, reason: str) -> None:
    with pytest.raises(UnsupportedModelError, match=reason) as info:
        geometry_from_config(config, "m")
    assert str(info.value).startswith("m: ")


def test_param_estimates() -> None:
    assert round(load_geometry("llama-3-70b").params / 1e9, 1) == 70.6
    assert round(load_geometry("smollm2-135m").params / 1e6) == 134
    assert load_geometry("deepseek-v3").params == 671_000_000_000  # published, MoE
    assert geometry_from_config(dict(LLAMA_LIKE, num_local_experts=8)).params is None


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_loads(name: str) -> None:
    assert load_geometry(name).name == name


def test_model_directory_and_config_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(LLAMA_LIKE))
    (tmp_path / "model-00001.safetensors").write_bytes(b"x" * 10)
    (tmp_path / "model-00002.safetensors").write_bytes(b"x" * 5)
    assert load_geometry(tmp_path).name == tmp_path.name
    assert load_geometry(tmp_path / "config.json").num_kv_heads == 8
    assert weights_bytes_on_disk(tmp_path) == 15
    assert weights_bytes_on_disk(tmp_path / "missing") is None


@pytest.mark.parametrize(("content", "match"), [(None, "not a preset"), ("{not json", "not valid JSON"), ("[1]", "not a JSON object")])
def test_unreadable_configs(tmp_path: Path, content: str | None, match: str) -> None:
    if content is not None:
        (tmp_path / "config.json").write_text(content)
    with pytest.raises(UnsupportedModelError, match=match):
        load_geometry(tmp_path if content is not None else tmp_path / "nothing-here")
