"""The lab's model runtime: a transformers causal LM whose attention the lab owns, and its caches.

[worker env: torch, transformers] The model runs with ``attn_implementation="kv_lab"``, an
attention function registered through transformers' ``AttentionInterface``. Transformers builds
no mask for an implementation it does not know, so :func:`lab_attention` builds its own: causal,
aligned at the end (query ``i`` of ``q`` sees every cached key except the ``q - 1 - i`` newest),
plus the left-padding mask of a batch (:attr:`Session.key_valid`). That alignment is what lets a
pruned cache (fewer physical keys than positions) run chunks and single decode steps unchanged.
An :class:`Observer` sees every layer's query, keys, values and attention probabilities.

Caches (both real ``transformers.DynamicCache`` subclasses, passed as ``past_key_values``):

- :class:`QuantizedCache`: K and V are quantize-dequantized (``backends.kv.lab.fp8``) as they are
  written, with static per-layer scales, so every later read (and the current forward's attention)
  sees the dequantized cache, as vLLM's FP8 cache does;
- ``backends.kv.lab.pruning.PrunedCache``: keys evicted per KV head.

Positions are always passed explicitly (``position_ids``): a pruned cache's length is not the
number of tokens seen.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AttentionInterface, AutoModelForCausalLM, AutoTokenizer, DynamicCache

from backends.kv.lab.fp8 import quantize_dequantize

ATTN_NAME = "kv_lab"

Observer = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], None]
"""``observer(layer, query, key, value, probs)``: shapes ``[b, heads, q, d]``, ``[b, kv_heads, k, d]``
(twice) and ``[b, heads, q, k]`` (float32)."""


@dataclass
class Session:
    """Per-forward state the attention function reads: observers and the key padding mask."""

    observers: list[Observer] = field(default_factory=list)
    key_valid: torch.Tensor | None = None
    """``[batch, tokens]`` bool, True for real (not padding) tokens; None for batch 1 without padding."""


SESSION = Session()


def lab_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                  attention_mask: Any, scaling: float, dropout: float = 0.0, **kwargs: Any) -> tuple[Any, Any]:
    """Eager attention with the lab's own causal + padding mask; returns ``(output, probs)``."""
    groups = query.shape[1] // key.shape[1]
    k = key.repeat_interleave(groups, dim=1)
    v = value.repeat_interleave(groups, dim=1)
    scores = torch.matmul(query.float(), k.float().transpose(-1, -2)) * scaling
    q_len, k_len = scores.shape[-2:]
    rows = torch.arange(q_len).unsqueeze(1) + (k_len - q_len)
    blocked = torch.arange(k_len).unsqueeze(0) > rows
    if SESSION.key_valid is not None:
        pad = ~SESSION.key_valid[:, :k_len]
        blocked = blocked.unsqueeze(0) | pad[:, None, :]
        blocked = (blocked & ~(torch.arange(k_len).unsqueeze(0) == rows)).unsqueeze(1)  # a pad row sees itself
    probs = torch.softmax(scores.masked_fill(blocked, float("-inf")), dim=-1)
    for observer in SESSION.observers:
        observer(module.layer_idx, query, key, value, probs)
    out = torch.matmul(probs.to(v.dtype), v).transpose(1, 2).contiguous()
    return out, None


AttentionInterface.register(ATTN_NAME, lab_attention)


@dataclass(frozen=True)
class LabModel:
    """A loaded model, its tokenizer and the KV geometry the lab needs."""

    model: Any
    tokenizer: Any
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int

    @property
    def scaling(self) -> float:
        return self.head_dim ** -0.5


def default_threads() -> int:
    """The CPUs this process may use, less the load others put on them (at least 1).

    On a shared machine torch's threads spin against other processes: with a one-minute load
    average at or above the CPU count, one thread ran a 400-token forward 3x faster than two here.
    """
    cpus = max(1, len(os.sched_getaffinity(0)))
    return max(1, min(cpus, round(cpus - os.getloadavg()[0])))


def load_model(model_dir: str | Path, *, max_layers: int | None = None, threads: int | None = None) -> LabModel:
    """[io] Load a Llama-family HF directory in float32 on CPU (offline); ``max_layers`` truncates it.

    ``threads``: torch threads (default :func:`default_threads`).
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    torch.set_num_threads(threads or default_threads())
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation=ATTN_NAME)
    return wrap_model(model, tokenizer, max_layers=max_layers)


def wrap_model(model: Any, tokenizer: Any, *, max_layers: int | None = None) -> LabModel:
    """A :class:`LabModel` of an already built model (tests build a tiny random one)."""
    if max_layers is not None and max_layers < len(model.model.layers):
        model.model.layers = model.model.layers[:max_layers]
        model.config.num_hidden_layers = max_layers
    model.config._attn_implementation = ATTN_NAME
    model.eval()
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return LabModel(model, tokenizer, cfg.num_hidden_layers, cfg.num_attention_heads,
                    cfg.num_key_value_heads or cfg.num_attention_heads, head_dim)


class QuantizedCache(DynamicCache):
    """A DynamicCache storing K and V after an FP8 round trip with static per-layer scales.

    ``k_scales`` / ``v_scales``: one entry per layer, each a float or a ``[kv_heads]`` tensor.
    """

    def __init__(self, fmt: str, k_scales: Sequence[Any], v_scales: Sequence[Any]) -> None:
        super().__init__()
        self.fmt, self.k_scales, self.v_scales = fmt, list(k_scales), list(v_scales)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        key_states = quantize_dequantize(key_states, self.fmt, self.k_scales[layer_idx])
        value_states = quantize_dequantize(value_states, self.fmt, self.v_scales[layer_idx])
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)


@torch.no_grad()
def forward(lab: LabModel, ids: torch.Tensor, cache: Any, start: int | torch.Tensor, keep: int = 0) -> torch.Tensor:
    """One forward of ``ids`` ``[b, n]`` at positions ``start..start+n-1``; returns float32 logits.

    ``start``: an int, or ``[b]`` per-row start positions (left padding). ``keep``: logits of the
    last ``keep`` positions only (0: all; the LM head is a fifth of a small model's work).
    """
    n = ids.shape[1]
    base = torch.as_tensor(start).view(-1, 1)
    position_ids = (base + torch.arange(n).unsqueeze(0)).clamp(min=0).expand(ids.shape[0], n)
    out = lab.model(input_ids=ids, past_key_values=cache, position_ids=position_ids, use_cache=True,
                    logits_to_keep=keep)
    return out.logits.float()
