"""The KV capacity a running vLLM worker reports, parsed from its ``/metrics`` or start-up log.

Two pure parsers, so that a worker's status can show the planned capacity
(``backends.kv.planner``) beside the one vLLM actually allocated:

- :func:`from_metrics`: the ``vllm:cache_config_info`` gauge (value 1) whose labels are vLLM's
  ``CacheConfig``: ``kv_cache_size_tokens``, ``num_gpu_blocks`` (also on CPU), ``block_size``,
  ``cache_dtype``, ``kv_cache_max_concurrency`` (vLLM >= 0.2x; older versions lack the token count);
- :func:`from_log`: vLLM's start-up line
  ``CPU KV cache size: 93,184 tokens, Maximum concurrency for 2,048 tokens per request: 45.50x``
  (``GPU KV cache size`` on CUDA); the last such line wins (a log holds one start).

Both return None when the text holds no capacity; label values ``None`` are read as missing.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

CACHE_CONFIG_INFO = "vllm:cache_config_info"
_LOG_LINE = re.compile(
    r"(?:GPU|CPU|XPU|TPU)[^:\n]*KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) "
    r"tokens per request: ([\d.]+)x")


@dataclass(frozen=True, slots=True)
class ReportedCapacity:
    """KV capacity as the worker reported it; ``source`` is ``metrics`` or ``log``."""

    kv_cache_tokens: int | None
    source: str
    num_blocks: int | None = None
    block_size: int | None = None
    cache_dtype: str | None = None
    max_concurrency: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _int(value: str | None) -> int | None:
    try:
        return int(float(value.replace(",", ""))) if value not in (None, "", "None") else None
    except ValueError:
        return None


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "", "None") else None
    except ValueError:
        return None


def _info_labels(metrics_text: str) -> dict[str, str] | None:
    # Parse only the info family's lines: a whole /metrics page may hold families this parser rejects.
    lines = [ln for ln in metrics_text.splitlines() if CACHE_CONFIG_INFO in ln]
    if not any(not ln.startswith("#") for ln in lines):
        return None
    for family in text_string_to_metric_families("\n".join(lines) + "\n"):
        for sample in family.samples:
            if sample.name == CACHE_CONFIG_INFO:
                return dict(sample.labels)
    return None


def from_metrics(metrics_text: str) -> ReportedCapacity | None:
    """Capacity from a ``/metrics`` page's ``vllm:cache_config_info`` labels."""
    labels = _info_labels(metrics_text)
    if labels is None:
        return None
    blocks = _int(labels.get("num_gpu_blocks")) or _int(labels.get("num_cpu_blocks"))
    block_size = _int(labels.get("block_size"))
    tokens = _int(labels.get("kv_cache_size_tokens"))
    if tokens is None and blocks is not None and block_size is not None:
        tokens = blocks * block_size
    return ReportedCapacity(tokens, "metrics", blocks, block_size, labels.get("cache_dtype") or None,
                            _float(labels.get("kv_cache_max_concurrency")))


def from_log(log_text: str) -> ReportedCapacity | None:
    """Capacity from the last "KV cache size: N tokens" line of a worker's start-up log."""
    matches = _LOG_LINE.findall(log_text)
    if not matches:
        return None
    tokens, _, concurrency = matches[-1]
    return ReportedCapacity(_int(tokens), "log", max_concurrency=float(concurrency))
