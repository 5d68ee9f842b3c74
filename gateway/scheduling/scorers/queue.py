"""``queue``: fewer requests waiting in the engine's queue scores higher.

``score = H / (H + waiting)`` with ``H = 4`` (a queue of 4 scores 0.5): saturating, so one more
waiting request matters when queues are short and little when they are long. Candidates without
fresh engine stats score a neutral 0.5.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.scheduling.types import Candidate, Context

HALF = 4.0
NEUTRAL = 0.5


class QueueScorer:
    def score(self, ctx: Context, candidates: Sequence[Candidate]) -> list[float]:
        out = []
        for c in candidates:
            waiting = None if c.stats is None else c.stats.waiting
            out.append(NEUTRAL if waiting is None else HALF / (HALF + max(waiting, 0.0)))
        return out
