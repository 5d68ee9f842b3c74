"""Pure parser: an engine's Prometheus text -> :class:`EngineStats` (what routing reads).

A per-engine **metric-name table** (:data:`ENGINES`) says which series carry each figure; the
engine is recognised by its marker series, never by an if-chain on names. Samples of one series
are summed over their labels (data-parallel ranks, ``finished_reason``...). Adding an engine is
one table row.

vLLM (v1, 0.32): queue ``vllm:num_requests_waiting``, running ``vllm:num_requests_running``,
KV usage ``vllm:kv_cache_usage_perc`` (0..1), prefix counters ``vllm:prefix_cache_queries_total``
and ``vllm:prefix_cache_hits_total`` (tokens, whole blocks only), finished requests
``vllm:request_success_total``, and ``vllm:cache_config_info`` whose *labels* carry
``block_size``, ``num_gpu_blocks`` and (0.32) ``kv_cache_size_tokens``: 93,184 tokens for 1 GiB of
FP8 KV on vLLM-CPU, twice the ``auto`` dtype's. Older vLLM names (``vllm:gpu_cache_usage_perc``,
``vllm:gpu_prefix_cache_*``) are alternates. SGLang: ``sglang:num_queue_reqs``,
``sglang:num_running_reqs``, ``sglang:token_usage``, capacity ``sglang:max_total_num_tokens``.
``process_start_time_seconds`` (prometheus_client's process collector) marks restarts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class EngineStats:
    """One scrape's figures; ``None`` where the engine does not report one."""

    engine: str
    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None
    prefix_queries: float | None = None
    prefix_hits: float | None = None
    requests_done: float | None = None
    generated_tokens: float | None = None
    block_size: int | None = None
    capacity_tokens: int | None = None
    start_time: float | None = None


@dataclass(frozen=True, slots=True)
class MetricNames:
    """Which series carry each figure for one engine (first present alternate wins)."""

    marker: str
    waiting: tuple[str, ...] = ()
    running: tuple[str, ...] = ()
    kv_usage: tuple[str, ...] = ()
    prefix_queries: tuple[str, ...] = ()
    prefix_hits: tuple[str, ...] = ()
    requests_done: tuple[str, ...] = ()
    generated_tokens: tuple[str, ...] = ()
    capacity_tokens: tuple[str, ...] = ()
    cache_info: str | None = None


ENGINES: Mapping[str, MetricNames] = MappingProxyType({
    "vllm": MetricNames(
        marker="vllm:num_requests_running",
        waiting=("vllm:num_requests_waiting",),
        running=("vllm:num_requests_running",),
        kv_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        prefix_queries=("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
        prefix_hits=("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
        requests_done=("vllm:request_success_total",),
        generated_tokens=("vllm:generation_tokens_total",),
        cache_info="vllm:cache_config_info",
    ),
    "sglang": MetricNames(
        marker="sglang:num_running_reqs",
        waiting=("sglang:num_queue_reqs",),
        running=("sglang:num_running_reqs",),
        kv_usage=("sglang:token_usage",),
        requests_done=("sglang:num_requests_total",),
        generated_tokens=("sglang:generation_tokens_total",),
        capacity_tokens=("sglang:max_total_num_tokens",),
    ),
})
"""The metric-name table, by engine."""

_FIGURES = (
    "waiting", "running", "kv_usage", "prefix_queries", "prefix_hits", "requests_done", "generated_tokens", "capacity_tokens",
)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_START = "process_start_time_seconds"


def _samples(text: str) -> tuple[dict[str, float], dict[str, str]]:
    """Sum of samples per series name, and the labels of every ``*_info`` series seen."""
    sums: dict[str, float] = {}
    infos: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        brace = line.find("{")
        space = line.find(" ")
        if brace != -1 and (space == -1 or brace < space):
            name = line[:brace]
            close = line.rfind("}")
            rest = line[close + 1 :].split()
            if name.endswith("_info"):
                infos[name] = line[brace + 1 : close]
        else:
            name = line[:space]
            rest = line[space + 1 :].split()
        if not rest:
            continue
        try:
            value = float(rest[0])
        except ValueError:
            continue
        sums[name] = sums.get(name, 0.0) + value
    return sums, infos


def _int(value: str | None) -> int | None:
    try:
        return int(float(value)) if value not in (None, "None", "") else None
    except ValueError:
        return None


def parse_engine_stats(text: str) -> EngineStats | None:
    """The figures of the first engine in :data:`ENGINES` whose marker appears; None if none does."""
    sums, infos = _samples(text)
    for engine, names in ENGINES.items():
        if names.marker not in sums:
            continue
        figures: dict[str, float | None] = {}
        for figure in _FIGURES:
            series = getattr(names, figure)
            figures[figure] = next((sums[s] for s in series if s in sums), None)
        block_size = capacity = None
        if names.cache_info and names.cache_info in infos:
            labels = dict(_LABEL.findall(infos[names.cache_info]))
            block_size = _int(labels.get("block_size"))
            capacity = _int(labels.get("kv_cache_size_tokens"))
            blocks = _int(labels.get("num_gpu_blocks"))
            if capacity is None and blocks is not None and block_size is not None:
                capacity = blocks * block_size
        if capacity is None and figures["capacity_tokens"] is not None:
            capacity = int(figures["capacity_tokens"])
        figures.pop("capacity_tokens")
        return EngineStats(engine, **figures, block_size=block_size, capacity_tokens=capacity,
                           start_time=sums.get(_START))
    return None


def restarted(before: EngineStats | None, after: EngineStats) -> bool:
    """True if ``after`` comes from a restarted engine: a new start time or a counter went back."""
    if before is None:
        return False
    if before.start_time is not None and after.start_time is not None and after.start_time != before.start_time:
        return True
    for figure in ("prefix_queries", "requests_done"):
        old, new = getattr(before, figure), getattr(after, figure)
        if old is not None and new is not None and new < old:
            return True
    return False
