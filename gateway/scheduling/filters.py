"""Filters, including the hot-spot guard.

``bounded-load`` (the hot-spot guard): consistent hashing with bounded loads (Mirrokni, Thorup,
Zadimoghaddam, SODA 2018) applied to cluster-wide in-flight requests. With ``T`` requests in
flight over ``n`` candidates and load factor ``c`` (``routing.hot_spot.load_factor``, default
2.0), a candidate is eligible only while ``in_flight + 1 <= ceil(c * (T + 1) * w / W)`` (``w``
its weight, ``W`` the sum): no endpoint takes more than ``c`` times its share of the work in
flight, however strongly a shared system prompt pulls traffic to it. The least loaded candidate
always satisfies the bound (``floor(T/n) + 1 = ceil((T+1)/n)``), so the guard never empties the
set; it only caps how far prefix affinity may pile requests up (measured on the testbed: 1.25
on in-flight counts of 1-8 costs hit rate; 2.0 stops pile-ups only); ``c -> inf`` disables it.

``bounded-share``: the same bound on each candidate's *recent assignments* (this replica's,
exponentially decayed with a half-life of ``routing.hot_spot.share_half_life`` requests) with
``c = routing.hot_spot.share_factor`` (default 1.25, the issue's imbalance target), never below
``share_floor`` (8) requests so a young window does not scatter prefixes: request counts stay
within ``c`` of an even split over a sliding window even when in-flight counts are too small
to discriminate (light load, short requests).

``bounded-share`` caps only a **loaded** candidate (:func:`loaded`): one whose engine queues
requests (``waiting >= busy_waiting``, default 1), whose KV cache is nearly full
(``kv_usage >= busy_kv_usage``, default 0.8), or that has ``busy_in_flight`` (default 2) requests
in flight per unit of weight, cluster-wide. While no candidate is loaded the filter keeps them
all: an idle cluster computes a shared prefix once, on one endpoint, however many requests reuse
it (40 sequential requests sharing a system prompt went 10/10/10/10 over four idle endpoints
with the bound applied regardless of load: four prefills of the same prefix). Engine stats that
are missing or stale count as not loaded; in-flight counts always count.

A filter that would drop every candidate keeps them all (the framework enforces it too).
"""

from __future__ import annotations

import math

from gateway.config import HotSpotSettings
from gateway.scheduling.types import Candidate, Context


def _bounded(candidates: list[Candidate], factor: float, loads: list[float], floor: float = 0.0) -> list[Candidate]:
    count = len(candidates)
    if count < 2:
        return candidates
    scale = factor * (sum(loads) + 1)
    weights = [c.weight for c in candidates]
    if weights.count(weights[0]) == count:  # equal weights (the usual case): one cap for all
        cap = max(math.ceil(scale / count - 1e-9), floor)
        if max(loads) + 1 <= cap:
            return candidates
        kept = [c for c, load in zip(candidates, loads, strict=True) if load + 1 <= cap]
    else:
        scale /= sum(weights)
        kept = [
            c for c, load, weight in zip(candidates, loads, weights, strict=True)
            if load + 1 <= max(math.ceil(scale * weight - 1e-9), floor)
        ]
    return kept or candidates


class BoundedLoadFilter:
    """The hot-spot guard on cluster-wide in-flight requests (see the module docstring)."""

    def filter(self, ctx: Context, candidates: list[Candidate]) -> list[Candidate]:
        return _bounded(candidates, ctx.hot_spot.load_factor, [c.in_flight for c in candidates])


def loaded(candidate: Candidate, hot: HotSpotSettings) -> bool:
    """Whether ``candidate`` is under real load, the only case where ``bounded-share`` may cap it."""
    if candidate.in_flight >= hot.busy_in_flight * candidate.weight:
        return True
    stats = candidate.stats
    if stats is None:
        return False
    return (stats.waiting is not None and stats.waiting >= hot.busy_waiting) or (
        stats.kv_usage is not None and stats.kv_usage >= hot.busy_kv_usage
    )


class BoundedShareFilter:
    """The bound on decayed recent assignments, applied to loaded candidates only (see the module docstring)."""

    def filter(self, ctx: Context, candidates: list[Candidate]) -> list[Candidate]:
        hot = ctx.hot_spot
        busy = [loaded(c, hot) for c in candidates]
        if not any(busy):  # nothing is loaded: affinity holds
            return candidates
        kept = _bounded(candidates, hot.share_factor, [c.recent for c in candidates], hot.share_floor)
        if len(kept) == len(candidates):
            return candidates
        within = {id(c) for c in kept}
        return [c for c, is_busy in zip(candidates, busy, strict=True) if not is_busy or id(c) in within]
