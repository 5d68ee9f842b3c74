"""``in-flight``: fewer gateway requests in flight (all replicas, per unit of weight) scores higher.

``score = 1 - load / max_load`` over the candidates, ``load = in_flight / weight``: the least
loaded gets 1, the busiest 0, all equal when the cluster is idle. The counts are the gateway's
own (this replica live, the others from the state store), so they react before the engine's
metrics are scraped again.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.scheduling.scorers import inverse_to_max
from gateway.scheduling.types import Candidate, Context


class InFlightScorer:
    def score(self, ctx: Context, candidates: Sequence[Candidate]) -> list[float]:
        return inverse_to_max([c.in_flight / c.weight for c in candidates])
