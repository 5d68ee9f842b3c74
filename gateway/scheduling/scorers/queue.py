"""``queue``: fewer requests waiting in the engine's queue scores higher.

``score = H / (H + waiting)`` with ``H = half`` (default 4: a queue of 4 scores 0.5): saturating,
so one more waiting request matters when queues are short and little when they are long.
Candidates without fresh engine stats score ``neutral`` (default 0.5).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from gateway.scheduling.types import Candidate, Context, Params

HALF = 4.0
NEUTRAL = 0.5


class QueueParams(Params):
    half: float = Field(HALF, gt=0, description="Waiting requests that score 0.5.")
    neutral: float = Field(NEUTRAL, ge=0, le=1, description="Score without fresh engine stats.")


class QueueScorer:
    def __init__(self, half: float = HALF, neutral: float = NEUTRAL) -> None:
        self._half = half
        self._neutral = neutral

    def score(self, ctx: Context, candidates: Sequence[Candidate]) -> list[float]:
        half = self._half
        neutral = self._neutral
        out = []
        for c in candidates:
            waiting = None if c.stats is None else c.stats.waiting
            out.append(neutral if waiting is None else half / (half + max(waiting, 0.0)))
        return out
