"""Pure KV-cache planner: bytes per token, blocks, tokens and concurrent sequences.

The arithmetic is vLLM's (v1 ``kv_cache_utils``), so the planned figures can be compared with the
ones a worker reports (``vllm:cache_config_info``, "KV cache size: N tokens" in its log):

- ``bytes_per_token = kv_elements_per_token * dtype_bytes``, where
  ``kv_elements_per_token`` comes from ``backends.kv.geometry`` (MHA/GQA: ``2 * layers * kv_heads *
  head_dim``; MLA: ``layers * (kv_lora_rank + qk_rope_head_dim)``) and ``dtype_bytes`` is 2 for
  ``auto`` (vLLM serves checkpoints in 16-bit by default), ``float16`` and ``bfloat16``, 4 for
  ``float32`` (``auto`` with ``--dtype float32``), and 1
  for ``fp8``, ``fp8_e4m3`` and ``fp8_e5m2``. Other dtypes are refused (:class:`PlanError`).
  Worked example, Llama-3-70B (80 layers, 8 KV heads, head dim 128) in FP16:
  2 * 80 * 8 * 128 * 2 = 327,680 bytes per token; FP8 halves it; 40,000 tokens take 13.1 GB.
- Tensor parallelism splits KV heads across ranks (``ceil(kv_heads / tp)`` per rank: heads are
  replicated when there are fewer than ranks); MLA's latent is replicated on every rank.
- ``num_blocks = kv_bytes_per_rank // (block_size * bytes_per_token_per_rank)`` (whole blocks);
  ``kv_cache_tokens = num_blocks * block_size``. Block size defaults: 128 on CPU, 16 on GPU.
- Concurrency, as vLLM logs it: ``num_blocks / ceil(max_model_len / block_size)``;
  ``max_concurrent_sequences`` is its floor (sequences of ``max_model_len`` tokens that fit).

A pruning budget (``kv_keep``, the fraction of each sequence's tokens a KV-pruning policy keeps,
as measured by ``kvgate kv-lab --study pruning``; vLLM itself does not prune) buys: a sequence of
``max_model_len`` tokens holds ``ceil(kv_keep * max_model_len)`` of them, so
``pruned_concurrency = num_blocks / ceil(kept_tokens_per_sequence / block_size)``, and the cache
covers ``covered_context_tokens = kv_cache_tokens / kv_keep`` tokens of context.

KV memory per rank (:class:`KvBudget`): on CPU exactly ``VLLM_CPU_KVCACHE_SPACE`` GiB; on GPU
``memory * gpu_memory_utilization - weights / tp - overhead``, where ``overhead`` stands for the
activation peak, CUDA graphs and non-torch memory that vLLM measures at start-up (default 2 GiB:
an estimate; the worker's own report is the authority, and status shows both).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Any

from backends.errors import PlanError
from backends.kv.geometry import AttentionKind, ModelGeometry

GIB = 1 << 30

KV_DTYPE_BYTES: Mapping[str, int] = MappingProxyType({
    "auto": 2, "float16": 2, "bfloat16": 2, "float32": 4, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
})
"""Bytes per cached element for each ``--kv-cache-dtype`` the planner sizes (``float32``: what
``auto`` stores when the model runs with ``--dtype float32``; see :func:`kv_storage_dtype`)."""


def kv_storage_dtype(kv_cache_dtype: str, model_dtype: str | None) -> str:
    """The dtype a KV element is stored as: ``auto`` follows ``--dtype`` (``float32`` -> 4 bytes)."""
    if kv_cache_dtype == "auto" and model_dtype in ("float32", "float16", "bfloat16"):
        return model_dtype
    return kv_cache_dtype

DEFAULT_BLOCK_SIZE: Mapping[str, int] = MappingProxyType({"cpu": 128, "gpu": 16})
DEFAULT_GPU_OVERHEAD_BYTES = 2 * GIB


@dataclass(frozen=True, slots=True)
class KvBudget:
    """KV cache memory on each rank (bytes) and how it was derived."""

    bytes_per_rank: int
    ranks: int
    description: str


def dtype_bytes(kv_cache_dtype: str) -> int:
    """Bytes per element for ``kv_cache_dtype``; :class:`PlanError` for one not sized here."""
    try:
        return KV_DTYPE_BYTES[kv_cache_dtype]
    except KeyError:
        raise PlanError(f"--kv-cache-dtype {kv_cache_dtype!r}: the planner sizes "
                        f"{', '.join(KV_DTYPE_BYTES)}") from None


def bytes_per_token(geometry: ModelGeometry, kv_cache_dtype: str) -> int:
    """KV bytes one token takes over the whole model (all layers, all ranks together)."""
    return geometry.kv_elements_per_token * dtype_bytes(kv_cache_dtype)


def bytes_per_token_per_rank(geometry: ModelGeometry, kv_cache_dtype: str, tensor_parallel_size: int = 1) -> int:
    """KV bytes one token takes on one tensor-parallel rank."""
    if tensor_parallel_size < 1:
        raise PlanError(f"--tensor-parallel-size: must be >= 1, got {tensor_parallel_size}")
    if geometry.attention is AttentionKind.MLA:
        return bytes_per_token(geometry, kv_cache_dtype)
    heads = math.ceil(geometry.num_kv_heads / tensor_parallel_size)
    return 2 * geometry.num_layers * heads * geometry.head_dim * dtype_bytes(kv_cache_dtype)


def cpu_budget(kvcache_space_gib: float) -> KvBudget:
    """vLLM-CPU's KV memory: exactly ``VLLM_CPU_KVCACHE_SPACE`` GiB."""
    if kvcache_space_gib <= 0:
        raise PlanError(f"VLLM_CPU_KVCACHE_SPACE: must be > 0 GiB, got {kvcache_space_gib}")
    return KvBudget(int(kvcache_space_gib * GIB), 1, f"VLLM_CPU_KVCACHE_SPACE={kvcache_space_gib:g} GiB")


def gpu_budget(gpu_memory_bytes: int, gpu_memory_utilization: float, weights_bytes: int, *,
               tensor_parallel_size: int = 1, overhead_bytes: int = DEFAULT_GPU_OVERHEAD_BYTES) -> KvBudget:
    """KV memory per GPU: its share of memory minus its slice of the weights and the overhead."""
    if not 0 < gpu_memory_utilization <= 1:
        raise PlanError(f"--gpu-memory-utilization: must be in (0, 1], got {gpu_memory_utilization}")
    usable = int(gpu_memory_bytes * gpu_memory_utilization)
    weights = math.ceil(weights_bytes / tensor_parallel_size)
    left = usable - weights - overhead_bytes
    if left <= 0:
        raise PlanError(f"no memory left for the KV cache: {usable / GIB:.1f} GiB usable per GPU, weights "
                        f"{weights / GIB:.1f} GiB per GPU, overhead {overhead_bytes / GIB:.1f} GiB")
    return KvBudget(left, tensor_parallel_size,
                    f"{gpu_memory_bytes / GIB:.1f} GiB x {gpu_memory_utilization:g} - weights "
                    f"{weights / GIB:.1f} GiB - overhead {overhead_bytes / GIB:.1f} GiB, per GPU")


@dataclass(frozen=True, slots=True)
class KvPlan:
    """The planned KV cache of one worker. Capacity fields are None without a budget."""

    model: str
    attention: str
    kv_cache_dtype: str
    bytes_per_token: int
    bytes_per_token_per_rank: int
    tensor_parallel_size: int
    block_size: int
    max_model_len: int | None
    context_bytes: int | None
    """Bytes of one sequence of ``max_model_len`` tokens."""
    kv_cache_bytes: int | None = None
    """KV memory over all ranks."""
    num_blocks: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_concurrent_sequences: int | None = None
    budget: str | None = None
    kv_keep: float = 1.0
    """Fraction of each sequence's tokens kept by KV pruning (1.0: none)."""
    kept_tokens_per_sequence: int | None = None
    pruned_concurrency: float | None = None
    pruned_concurrent_sequences: int | None = None
    covered_context_tokens: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan(geometry: ModelGeometry, *, kv_cache_dtype: str = "fp8", max_model_len: int | None = None,
         budget: KvBudget | None = None, block_size: int = DEFAULT_BLOCK_SIZE["gpu"],
         tensor_parallel_size: int = 1, kv_keep: float = 1.0) -> KvPlan:
    """Plan ``geometry``'s KV cache; ``max_model_len`` defaults to the model's context length.

    ``kv_keep``: the kept fraction of a pruning budget, in (0, 1] (see the module docstring).
    """
    if block_size < 1:
        raise PlanError(f"--block-size: must be >= 1, got {block_size}")
    if not 0 < kv_keep <= 1:
        raise PlanError(f"--kv-keep: must be in (0, 1], got {kv_keep}")
    per_token = bytes_per_token(geometry, kv_cache_dtype)
    per_rank = bytes_per_token_per_rank(geometry, kv_cache_dtype, tensor_parallel_size)
    length = max_model_len if max_model_len is not None else geometry.max_position_embeddings
    fields: dict[str, Any] = {}
    if budget is not None:
        blocks = budget.bytes_per_rank // (block_size * per_rank)
        fields = dict(kv_cache_bytes=budget.bytes_per_rank * budget.ranks, num_blocks=blocks,
                      kv_cache_tokens=blocks * block_size, budget=budget.description)
        if length:
            concurrency = blocks / math.ceil(length / block_size)
            fields.update(max_concurrency=round(concurrency, 2), max_concurrent_sequences=int(concurrency))
        if kv_keep < 1:
            fields["covered_context_tokens"] = int(blocks * block_size / kv_keep)
    if kv_keep < 1 and length:
        kept = math.ceil(kv_keep * length)
        fields["kept_tokens_per_sequence"] = kept
        if budget is not None:
            pruned = fields["num_blocks"] / math.ceil(kept / block_size)
            fields.update(pruned_concurrency=round(pruned, 2), pruned_concurrent_sequences=int(pruned))
    return KvPlan(model=geometry.name, attention=geometry.attention.value, kv_cache_dtype=kv_cache_dtype,
                  bytes_per_token=per_token, bytes_per_token_per_rank=per_rank,
                  tensor_parallel_size=tensor_parallel_size, block_size=block_size, max_model_len=length,
                  context_bytes=per_token * length if length else None, kv_keep=kv_keep, **fields)


def relative_error(planned: int, reported: int) -> float:
    """``|planned - reported| / reported`` (0.05 is 5 %)."""
    if reported <= 0:
        raise PlanError(f"reported capacity must be > 0, got {reported}")
    return abs(planned - reported) / reported
