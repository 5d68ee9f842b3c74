"""Benchmark summaries: per-policy rows from the workers' own metrics and the client's timings.

- **hit rate**: ``sum(vllm:prefix_cache_hits_total) / sum(vllm:prefix_cache_queries_total)``
  over the workers (tokens), read from each worker's ``/metrics`` after the replay (workers start
  fresh for every policy, so the totals are the run's);
- **TTFT / E2E** p50 and p99 in ms, over successful requests, as the client measured them;
- **throughput**: successful requests and generated tokens per second of replay wall time;
- **imbalance**: max / mean of the requests each worker finished (``vllm:request_success_total``).

Rows print as a fixed-width table or, with ``--json``, as one JSON object per line with at least
``policy``, ``hit_rate``, ``ttft_p50_ms``, ``ttft_p99_ms`` and ``imbalance``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from bench.replay import ReplayResult
from bench.trace import percentile


@dataclass(frozen=True)
class WorkerStats:
    """What one worker's ``/metrics`` says about the run."""

    queries: float
    hits: float
    requests: float


def parse_worker_metrics(text: str) -> WorkerStats:
    """Sum the prefix-cache counters and finished requests out of vLLM metrics text."""
    totals = {"vllm:prefix_cache_queries_total": 0.0, "vllm:prefix_cache_hits_total": 0.0,
              "vllm:request_success_total": 0.0}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in totals:
            totals[name] += float(line.rsplit(" ", 1)[1])
    return WorkerStats(totals["vllm:prefix_cache_queries_total"],
                       totals["vllm:prefix_cache_hits_total"],
                       totals["vllm:request_success_total"])


@dataclass(frozen=True)
class PolicyRow:
    """One line of the table."""

    policy: str
    hit_rate: float
    ttft_p50_ms: float | None
    ttft_p99_ms: float | None
    e2e_p50_ms: float | None
    e2e_p99_ms: float | None
    req_per_s: float | None
    tok_per_s: float | None
    imbalance: float
    requests: int
    errors: int
    per_worker: tuple[int, ...]
    client_hit_rate: float | None = None
    first_error: str | None = None


def _ms(values: Sequence[float], q: float) -> float | None:
    value = percentile(values, q)
    return None if math.isnan(value) else round(value * 1000, 1)


def policy_row(policy: str, replay: ReplayResult, workers: Sequence[WorkerStats]) -> PolicyRow:
    """Summarise one policy's replay and its workers' metrics."""
    ok = [r for r in replay.results if r.ok]
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    e2es = [r.e2e for r in ok if r.e2e is not None]
    queries = sum(w.queries for w in workers)
    per_worker = tuple(int(w.requests) for w in workers)
    mean = sum(per_worker) / len(per_worker) if per_worker else 0
    prompt = sum(r.prompt_tokens for r in ok)
    return PolicyRow(
        policy=policy,
        hit_rate=round(sum(w.hits for w in workers) / queries, 4) if queries else 0.0,
        ttft_p50_ms=_ms(ttfts, 0.5), ttft_p99_ms=_ms(ttfts, 0.99),
        e2e_p50_ms=_ms(e2es, 0.5), e2e_p99_ms=_ms(e2es, 0.99),
        req_per_s=round(len(ok) / replay.wall_s, 2) if replay.wall_s else None,
        tok_per_s=round(sum(r.completion_tokens for r in ok) / replay.wall_s, 1)
        if replay.wall_s else None,
        imbalance=round(max(per_worker) / mean, 3) if mean else 0.0,
        requests=len(replay.results), errors=len(replay.results) - len(ok), per_worker=per_worker,
        client_hit_rate=round(sum(r.cached_tokens for r in ok) / prompt, 4) if prompt else None,
        first_error=next((r.error for r in replay.results if not r.ok), None),
    )


_COLUMNS = (("policy", 24), ("hit_rate", 9), ("ttft_p50_ms", 12), ("ttft_p99_ms", 12),
            ("e2e_p50_ms", 11), ("e2e_p99_ms", 11), ("req_per_s", 10), ("tok_per_s", 10),
            ("imbalance", 10), ("errors", 7), ("per_worker", 22))


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return "/".join(str(v) for v in value)
    return str(value)


def format_table(rows: Sequence[PolicyRow]) -> str:
    """The rows as a fixed-width text table."""
    header = "".join(name.ljust(width) for name, width in _COLUMNS)
    lines = [header, "-" * len(header)]
    for row in rows:
        values = asdict(row)
        values["per_worker"] = row.per_worker
        lines.append("".join(_cell(values[name]).ljust(width) for name, width in _COLUMNS))
    lines += [f"{row.policy}: {row.errors} errors, first: {row.first_error}"
              for row in rows if row.errors]
    return "\n".join(lines)


def format_json(rows: Sequence[PolicyRow]) -> str:
    """One JSON object per row and line."""
    return "\n".join(json.dumps(asdict(row)) for row in rows)
