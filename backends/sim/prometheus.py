"""The simulated worker's Prometheus metrics, with vLLM's names, labels, buckets and meanings.

Names and meanings follow vLLM v1 (``vllm/v1/metrics/loggers.py``); buckets follow
``vllm/v1/metrics/buckets.py``. Every series carries ``model_name`` (the served name) and
``engine="0"``, as vLLM's do. What each figure means:

- ``vllm:num_requests_running`` / ``vllm:num_requests_waiting``: scheduler queues (gauges).
- ``vllm:kv_cache_usage_perc``: pinned KV blocks over the pool, 0..1 (gauge).
- ``vllm:prefix_cache_queries_total`` / ``vllm:prefix_cache_hits_total``: prompt tokens looked up
  and hit (whole blocks only), recorded once per request at admission.
- ``vllm:prompt_tokens_total``, ``vllm:prompt_tokens_cached_total``,
  ``vllm:generation_tokens_total``, ``vllm:num_preemptions_total``,
  ``vllm:request_success_total{finished_reason}``: counters.
- ``vllm:cache_config_info``: a gauge fixed at 1 whose labels carry the cache configuration
  (``block_size``, ``num_gpu_blocks``, ``enable_prefix_caching``, ``cache_dtype``, ...).
- Histograms: ``vllm:time_to_first_token_seconds``, ``vllm:inter_token_latency_seconds``,
  ``vllm:e2e_request_latency_seconds``, ``vllm:request_queue_time_seconds``,
  ``vllm:request_prompt_tokens``, ``vllm:request_generation_tokens``,
  ``vllm:iteration_tokens_total``.

Rendering is a small text-format writer (no ``prometheus_client`` registry, so no global state).
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
ITL_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)
REQUEST_LATENCY_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)
ITERATION_TOKENS_BUCKETS: tuple[float, ...] = (
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
)


def one_two_five_buckets(max_value: int) -> tuple[float, ...]:
    """vLLM's 1-2-5 series capped at ``max_value`` (request token-count buckets)."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return tuple(buckets)
            buckets.append(value)
        exponent += 1


@dataclass
class Histogram:
    """Cumulative-at-render histogram with fixed upper bounds."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.buckets) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.count += 1


@dataclass
class WorkerMetrics:
    """Counters and histograms one simulated worker accumulates (gauges are read live)."""

    max_model_len: int
    prompt_tokens: int = 0
    prompt_tokens_cached: int = 0
    generation_tokens: int = 0
    success: dict[str, int] = field(default_factory=dict)
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    queue: Histogram = field(default_factory=lambda: Histogram(REQUEST_LATENCY_BUCKETS))
    iteration_tokens: Histogram = field(default_factory=lambda: Histogram(ITERATION_TOKENS_BUCKETS))
    request_prompt: Histogram = field(init=False)
    request_generation: Histogram = field(init=False)

    def __post_init__(self) -> None:
        token_buckets = one_two_five_buckets(self.max_model_len)
        self.request_prompt = Histogram(token_buckets)
        self.request_generation = Histogram(token_buckets)

    def record_finished(self, reason: str, prompt_tokens: int, generation_tokens: int) -> None:
        """Count one finished request (``reason``: stop, length, abort)."""
        self.success[reason] = self.success.get(reason, 0) + 1
        self.request_prompt.observe(prompt_tokens)
        self.request_generation.observe(generation_tokens)


@dataclass(frozen=True)
class GaugeSnapshot:
    """Live gauge values and the prefix-cache counters read from the engine at scrape time."""

    running: int
    waiting: int
    kv_usage: float
    prefix_queries: int
    prefix_hits: int
    preemptions: int


def _labels(base: Mapping[str, str], extra: Mapping[str, str] | None = None) -> str:
    items = {**base, **(extra or {})}
    return "{" + ",".join(f'{k}="{items[k]}"' for k in sorted(items)) + "}"


def _number(value: float) -> str:
    return repr(float(value))


class _Writer:
    def __init__(self, base: Mapping[str, str]) -> None:
        self.base = base
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value: float, extra: Mapping[str, str] | None = None) -> None:
        self.lines.append(f"{name}{_labels(self.base, extra)} {_number(value)}")

    def scalar(self, name: str, kind: str, help_text: str, value: float) -> None:
        self.family(name, kind, help_text)
        self.sample(name, value)

    def histogram(self, name: str, help_text: str, hist: Histogram) -> None:
        self.family(name, "histogram", help_text)
        cumulative = 0
        for bound, count in zip(hist.buckets, hist.counts, strict=False):
            cumulative += count
            self.sample(f"{name}_bucket", cumulative, {"le": _number(bound)})
        self.sample(f"{name}_bucket", hist.count, {"le": "+Inf"})
        self.sample(f"{name}_count", hist.count)
        self.sample(f"{name}_sum", hist.total)


def render(
    model_name: str,
    gauges: GaugeSnapshot,
    metrics: WorkerMetrics,
    cache_info: Mapping[str, str],
) -> str:
    """Prometheus text exposition of one worker, in vLLM's vocabulary."""
    w = _Writer({"model_name": model_name, "engine": "0"})
    w.scalar("vllm:num_requests_running", "gauge",
             "Number of requests in model execution batches.", gauges.running)
    w.scalar("vllm:num_requests_waiting", "gauge",
             "Number of requests waiting to be processed.", gauges.waiting)
    w.scalar("vllm:kv_cache_usage_perc", "gauge",
             "KV-cache usage. 1 means 100 percent usage.", gauges.kv_usage)
    counters: Sequence[tuple[str, str, float]] = (
        ("vllm:prefix_cache_queries_total",
         "Prefix cache queries, in terms of number of queried tokens.", gauges.prefix_queries),
        ("vllm:prefix_cache_hits_total",
         "Prefix cache hits, in terms of number of cached tokens.", gauges.prefix_hits),
        ("vllm:num_preemptions_total",
         "Cumulative number of preemption from the engine.", gauges.preemptions),
        ("vllm:prompt_tokens_total", "Number of prefill tokens processed.", metrics.prompt_tokens),
        ("vllm:prompt_tokens_cached_total",
         "Number of cached prompt tokens (local + external).", metrics.prompt_tokens_cached),
        ("vllm:generation_tokens_total",
         "Number of generation tokens processed.", metrics.generation_tokens),
    )
    for name, help_text, value in counters:
        w.scalar(name, "counter", help_text, value)
    w.family("vllm:request_success_total", "counter", "Count of successfully processed requests.")
    for reason in sorted({"stop", "length", "abort", "error", "repetition", *metrics.success}):
        w.sample("vllm:request_success_total", metrics.success.get(reason, 0),
                 {"finished_reason": reason})
    _histograms(w, metrics)
    w.family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
    w.lines.append(f"vllm:cache_config_info{_labels(cache_info, {'engine': '0'})} 1.0")
    return "\n".join(w.lines) + "\n"


def _histograms(w: _Writer, m: WorkerMetrics) -> None:
    table: Sequence[tuple[str, str, Histogram]] = (
        ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
         m.ttft),
        ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
         m.itl),
        ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
         m.e2e),
        ("vllm:request_queue_time_seconds",
         "Histogram of time spent in WAITING phase for request.", m.queue),
        ("vllm:request_prompt_tokens", "Number of prefill tokens processed.", m.request_prompt),
        ("vllm:request_generation_tokens", "Number of generation tokens processed.",
         m.request_generation),
        ("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
         m.iteration_tokens),
    )
    for name, help_text, hist in table:
        w.histogram(name, help_text, hist)
