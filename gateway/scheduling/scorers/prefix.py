"""``prefix``: the fraction of the prompt's blocks the endpoint's prefix index holds.

``score = matched / blocks`` (0 for every candidate when the prompt has no full block). The
index is approximate (``gateway/prefix/index.py``); the closed loop keeps it honest.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.scheduling.types import Candidate, Context


class PrefixScorer:
    def score(self, ctx: Context, candidates: Sequence[Candidate]) -> list[float]:
        total = len(ctx.key.blocks)
        if not total:
            return [0.0] * len(candidates)
        return [min(c.matched, total) / total for c in candidates]
