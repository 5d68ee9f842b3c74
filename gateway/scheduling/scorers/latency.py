"""``latency``: a faster endpoint scores higher: ``best / own`` of the latency EWMAs.

The EWMA (``scheduling/feedback.py``, alpha 0.2) is of seconds per output token over whole requests
(E2E / (completion tokens + 1)), so it mixes queueing, prefill and decode speed and compares
endpoints of different hardware. An endpoint not yet observed scores 1 (it gets tried).
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.scheduling.types import Candidate, Context


class LatencyScorer:
    def score(self, ctx: Context, candidates: Sequence[Candidate]) -> list[float]:
        known = [c.latency for c in candidates if c.latency is not None and c.latency > 0]
        if not known:
            return [1.0] * len(candidates)
        best = min(known)
        return [1.0 if c.latency is None or c.latency <= 0 else best / c.latency for c in candidates]
