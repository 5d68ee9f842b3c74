"""A model's KV geometry: what one token's KV cache is made of, read from its ``config.json``.

:func:`geometry_from_config` (pure) reads a Hugging Face ``config.json`` mapping;
:func:`load_geometry` [io] takes a preset name (``backends.model_presets``), a model directory
or a ``config.json`` path. Multimodal configs are read through their ``text_config``.

Attention kinds sized exactly (the units are elements per token per layer, before the dtype):

- **MHA** / **GQA**: K and V of every KV head, ``2 * num_key_value_heads * head_dim``
  (``num_key_value_heads`` absent means MHA: one KV head per attention head; ``head_dim`` absent
  means ``hidden_size / num_attention_heads``);
- **MLA** (DeepSeek-V2/V3/R1, keyed by ``kv_lora_rank``): one compressed latent plus the decoupled
  RoPE key, ``kv_lora_rank + qk_rope_head_dim`` (512 + 64 = 576), shared by all heads; vLLM
  caches exactly this (one "head" of size 576).

Everything else is refused with :class:`~backends.errors.UnsupportedModelError`, never guessed:
sliding-window or chunked attention (vLLM sizes those layers differently), state-space or hybrid
layers, encoder-decoder models, cross-layer KV sharing, DeepSeek's sparse-attention indexer, or a
config lacking the fields above.

``params`` is an estimate of the parameter count for dense decoder configs (embeddings, attention
projections, a gated 3-matrix MLP), or a preset's published count; ``None`` when unknown (MoE).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.errors import UnsupportedModelError
from backends.model_presets import PRESETS

STATE_SPACE_MODEL_TYPES = frozenset({
    "mamba", "mamba2", "falcon_mamba", "jamba", "zamba", "zamba2", "bamba", "falcon_h1", "nemotron_h",
    "granitemoehybrid", "rwkv", "rwkv5", "rwkv6", "recurrent_gemma", "qwen3_next", "plamo2", "lfm2",
    "minimax", "minimax_text_01", "kimi_linear",
})
"""``model_type`` values whose layers are (partly) recurrent or linear attention."""

HYBRID_KEYS = ("ssm_cfg", "mamba_d_state", "mamba_expand", "layers_block_type", "hybrid_override_pattern",
               "attn_layer_indices", "linear_attn_config", "full_attention_interval")
"""Keys that only hybrid or state-space configs carry."""


class AttentionKind(enum.Enum):
    MHA = "mha"
    GQA = "gqa"
    MLA = "mla"


@dataclass(frozen=True, slots=True)
class ModelGeometry:
    """The KV-relevant shape of one decoder model."""

    name: str
    attention: AttentionKind
    num_layers: int
    num_attention_heads: int
    num_kv_heads: int
    """KV heads (MHA: = attention heads; MLA: 1, the shared latent)."""
    head_dim: int
    """Elements per KV head per token (MLA: ``kv_lora_rank + qk_rope_head_dim``)."""
    max_position_embeddings: int | None = None
    params: int | None = None

    @property
    def kv_elements_per_token(self) -> int:
        """Cached elements for one token across all layers (K and V, or MLA's latent)."""
        per_layer = self.num_kv_heads * self.head_dim
        return self.num_layers * (per_layer if self.attention is AttentionKind.MLA else 2 * per_layer)


def _first(config: Mapping[str, Any], *keys: str) -> Any:
    return next((config[k] for k in keys if config.get(k) is not None), None)


def _require_int(config: Mapping[str, Any], name: str, *keys: str) -> int:
    value = _first(config, *keys)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise UnsupportedModelError(f"{name}: config.json has no positive integer {' / '.join(keys)}")
    return value


def _refusal(config: Mapping[str, Any]) -> str | None:
    """Why this config's attention cannot be sized exactly, or None."""
    model_type = str(config.get("model_type", ""))
    if config.get("is_encoder_decoder"):
        return "encoder-decoder model (cross-attention KV)"
    if model_type in STATE_SPACE_MODEL_TYPES:
        return f"state-space or hybrid layers (model_type {model_type!r})"
    hybrid = [k for k in HYBRID_KEYS if config.get(k) is not None]
    if hybrid:
        return f"state-space or hybrid layers ({hybrid[0]} in config.json)"
    other = sorted({str(t) for t in config.get("layer_types") or () if t != "full_attention"})
    if other:
        return f"layers other than full attention: {', '.join(other)} (layer_types)"
    if config.get("sliding_window") is not None and config.get("use_sliding_window") is not False:
        return f"sliding-window attention (sliding_window={config['sliding_window']})"
    if config.get("attention_chunk_size") is not None:
        return f"chunked local attention (attention_chunk_size={config['attention_chunk_size']})"
    if config.get("num_kv_shared_layers"):
        return "KV shared across layers (num_kv_shared_layers)"
    if config.get("index_topk") is not None:
        return "DeepSeek sparse attention: the indexer keeps its own key cache (index_topk)"
    return None


def _dense_params(config: Mapping[str, Any], hidden: int, heads: int, kv_heads: int, head_dim: int,
                  layers: int) -> int | None:
    intermediate, vocab = config.get("intermediate_size"), config.get("vocab_size")
    moe = any(config.get(k) for k in ("num_local_experts", "n_routed_experts", "num_experts"))
    if moe or not isinstance(intermediate, int) or not isinstance(vocab, int):
        return None
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    embeddings = vocab * hidden * (1 if config.get("tie_word_embeddings") else 2)
    return embeddings + layers * (attention + 3 * hidden * intermediate)


def geometry_from_config(config: Mapping[str, Any], name: str = "model", params: int | None = None) -> ModelGeometry:
    """The :class:`ModelGeometry` of a ``config.json`` mapping; ``params`` overrides the estimate.

    Raises :class:`UnsupportedModelError` naming why, for anything but MHA, GQA or MLA.
    """
    if isinstance(config.get("text_config"), Mapping):
        config = {**config["text_config"], "model_type": config["text_config"].get("model_type", config.get("model_type"))}
    reason = _refusal(config)
    if reason:
        raise UnsupportedModelError(f"{name}: {reason}; the KV planner sizes MHA, GQA and MLA only")
    layers = _require_int(config, name, "num_hidden_layers", "n_layer", "num_layers")
    heads = _require_int(config, name, "num_attention_heads", "n_head", "num_heads")
    max_pos = _first(config, "max_position_embeddings", "n_positions", "max_sequence_length")
    if config.get("kv_lora_rank") is not None:
        rank = _require_int(config, name, "kv_lora_rank")
        rope = _require_int(config, name, "qk_rope_head_dim")
        return ModelGeometry(name, AttentionKind.MLA, layers, heads, 1, rank + rope, max_pos, params)
    hidden = _require_int(config, name, "hidden_size", "n_embd", "d_model")
    kv_heads = 1 if config.get("multi_query") else (_first(config, "num_key_value_heads", "num_kv_heads", "n_head_kv") or heads)
    if not isinstance(kv_heads, int) or kv_heads <= 0 or heads % kv_heads:
        raise UnsupportedModelError(f"{name}: num_key_value_heads {kv_heads!r} does not divide {heads} heads")
    head_dim = config.get("head_dim") or (hidden // heads if hidden % heads == 0 else None)
    if not isinstance(head_dim, int) or head_dim <= 0:
        raise UnsupportedModelError(f"{name}: no head_dim, and hidden_size {hidden} is not a multiple of {heads} heads")
    kind = AttentionKind.MHA if kv_heads == heads else AttentionKind.GQA
    estimate = params if params is not None else _dense_params(config, hidden, heads, kv_heads, head_dim, layers)
    return ModelGeometry(name, kind, layers, heads, kv_heads, head_dim, max_pos, estimate)


def load_config(source: str | Path) -> tuple[dict[str, Any], str]:
    """[io] ``(config, name)`` of a model directory or ``config.json`` file."""
    path = Path(source).expanduser()
    config_path = path / "config.json" if path.is_dir() else path
    try:
        config = json.loads(config_path.read_text())
    except OSError as exc:
        raise UnsupportedModelError(f"{source}: not a preset ({', '.join(PRESETS)}) and no readable "
                                    f"config.json ({exc.strerror or exc})") from exc
    except ValueError as exc:
        raise UnsupportedModelError(f"{config_path}: not valid JSON ({exc})") from exc
    if not isinstance(config, dict):
        raise UnsupportedModelError(f"{config_path}: not a JSON object")
    name = path.name if path.is_dir() else path.parent.name or str(path)
    return config, name


def load_geometry(source: str | Path) -> ModelGeometry:
    """[io] Geometry of a preset name, a model directory or a ``config.json`` path."""
    preset = PRESETS.get(str(source))
    if preset is not None:
        return geometry_from_config(preset.config, str(source), preset.params)
    config, name = load_config(source)
    return geometry_from_config(config, name)


def weights_bytes_on_disk(model_dir: str | Path) -> int | None:
    """[io] Total size of the ``*.safetensors`` files in ``model_dir`` (None if there are none)."""
    path = Path(model_dir).expanduser()
    if not path.is_dir():
        return None
    sizes = [f.stat().st_size for f in path.glob("*.safetensors")]
    return sum(sizes) if sizes else None
