"""Request statistics for the admin API, read from this replica's Prometheus registry (pure).

``GET /admin/stats`` answers, per model, per cluster and per endpoint: requests, errors (outcome
``client_error`` or ``upstream_error``), cancelled (outcome ``cancelled``: the client left first),
latency (count, mean and the p50/p95 upper bucket bounds, seconds) and token totals (input,
cached, output) with cost in USD. Everything comes from the instruments the request path already
writes (``kvgate_requests``, ``kvgate_request_errors``, ``kvgate_request_duration_seconds``,
``kvgate_endpoint_request_duration_seconds``, ``kvgate_tokens`` and ``kvgate_cost_usd`` for models and
clusters, ``kvgate_endpoint_tokens`` and ``kvgate_endpoint_cost_usd`` for endpoints), so serving
stats costs nothing per request. An endpoint's row counts the requests it answered (a continued
stream: its last endpoint). Figures are this replica's since it started; Prometheus sums replicas.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from prometheus_client import Metric

_TOKEN_KINDS = {"prompt": "input_tokens", "cached": "cached_tokens", "completion": "output_tokens"}


def _row() -> dict[str, Any]:
    return {"requests": 0, "errors": 0, "cancelled": 0, "input_tokens": 0, "cached_tokens": 0, "output_tokens": 0, "cost_usd": 0.0}


def quantile_bound(buckets: list[tuple[float, float]], q: float) -> float | None:
    """Upper bound of the bucket holding quantile ``q`` of cumulative ``(le, count)`` pairs."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    target = q * buckets[-1][1]
    for bound, count in buckets:
        if count >= target:
            return None if math.isinf(bound) else bound
    return None


def _latency(histograms: dict[str, dict[str, Any]], key: str) -> dict[str, Any]:
    data = histograms.get(key)
    if not data or not data["count"]:
        return {"count": 0, "mean_s": None, "p50_le_s": None, "p95_le_s": None}
    buckets = sorted(data["buckets"].items())
    return {
        "count": int(data["count"]),
        "mean_s": round(data["sum"] / data["count"], 6),
        "p50_le_s": quantile_bound(buckets, 0.5),
        "p95_le_s": quantile_bound(buckets, 0.95),
    }


def _histograms(family: Metric, label: str) -> dict[str, dict[str, Any]]:
    """Per value of ``label``: summed count, sum and cumulative buckets over other labels."""
    out: dict[str, dict[str, Any]] = {}
    for sample in family.samples:
        key = sample.labels.get(label, "")
        entry = out.setdefault(key, {"count": 0.0, "sum": 0.0, "buckets": {}})
        if sample.name.endswith("_bucket"):
            bound = float(sample.labels["le"])
            entry["buckets"][bound] = entry["buckets"].get(bound, 0.0) + sample.value
        elif sample.name.endswith("_count"):
            entry["count"] += sample.value
        elif sample.name.endswith("_sum"):
            entry["sum"] += sample.value
    return out


def compute_stats(families: Iterable[Metric]) -> dict[str, Any]:
    """``{"models": {...}, "clusters": {...}, "endpoints": {...}}`` from collected metric families."""
    by_name = {family.name: family for family in families}
    tables: dict[str, dict[str, dict[str, Any]]] = {"models": {}, "clusters": {}, "endpoints": {}}
    dims = (("models", "model"), ("clusters", "cluster"), ("endpoints", "endpoint"))

    def rows(labels: dict[str, str]) -> Iterable[dict[str, Any]]:
        for table, label in dims:
            value = labels.get(label)
            if value:
                yield tables[table].setdefault(value, _row())

    _add_counts(by_name, rows)
    _add_latency(tables, by_name)
    return tables


def _add_counts(by_name: dict[str, Metric], rows: Any) -> None:
    """Add requests, errors, cancels, tokens and cost to every row a sample's labels name (``rows(labels)``).

    Token and cost samples of ``kvgate_tokens``/``kvgate_cost_usd`` name a model and a cluster, those of
    ``kvgate_endpoint_tokens``/``kvgate_endpoint_cost_usd`` an endpoint only: each lands in its own rows once.
    """
    for sample in _samples(by_name, "kvgate_requests", "_total"):
        outcome = sample.labels.get("outcome")
        field = "errors" if outcome in ("client_error", "upstream_error") else "cancelled" if outcome == "cancelled" else ""
        for row in rows(sample.labels):
            row["requests"] += int(sample.value)
            if field:
                row[field] += int(sample.value)
    for family in ("kvgate_tokens", "kvgate_endpoint_tokens"):
        for sample in _samples(by_name, family, "_total"):
            field = _TOKEN_KINDS.get(sample.labels.get("kind", ""))
            if field:
                for row in rows(sample.labels):
                    row[field] += int(sample.value)
    for family in ("kvgate_cost_usd", "kvgate_endpoint_cost_usd"):
        for sample in _samples(by_name, family, "_total"):
            for row in rows(sample.labels):
                row["cost_usd"] = round(row["cost_usd"] + sample.value, 9)


def _samples(by_name: dict[str, Metric], family: str, suffix: str) -> list[Any]:
    metric = by_name.get(family)
    return [sample for sample in metric.samples if sample.name == family + suffix] if metric else []


def _add_latency(tables: dict[str, dict[str, dict[str, Any]]], by_name: dict[str, Metric]) -> None:
    e2e = by_name.get("kvgate_request_duration_seconds")
    per_endpoint = by_name.get("kvgate_endpoint_request_duration_seconds")
    sources = (("models", e2e, "model"), ("clusters", e2e, "cluster"), ("endpoints", per_endpoint, "endpoint"))
    for table, family, label in sources:
        histograms = _histograms(family, label) if family is not None else {}
        for key, row in tables[table].items():
            row["latency"] = _latency(histograms, key)
