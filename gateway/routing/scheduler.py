"""Endpoint scheduling inside a cluster: the seam and the two basic policies.

A :class:`Scheduler` ranks a cluster's endpoints for one request, best first; the attempt loop
in ``proxy.py`` tries them in that order. Policies are pure over the endpoints' live state
(health, in-flight, weight) and registered by kebab-case name in :data:`SCHEDULERS`, which
``[routing] policy`` selects. The prefix-cache-aware framework (filters, weighted scorers,
picker) plugs in behind the same protocol.

Policies:
    ``least-in-flight``: routable endpoints ordered by ``in_flight / weight``; ties rotate so
        that an idle cluster still spreads requests.
    ``round-robin``: routable endpoints in rotating order, ignoring load.

Unhealthy (ejected) endpoints are ranked only when nothing else is left, so a cluster whose
endpoints all failed their checks is still tried rather than refused outright.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from gateway.endpoints.model import Endpoint
from gateway.protocol.openai import InferenceRequest


class Scheduler(Protocol):
    """Ranks endpoints for a request, best first. Must not await or do I/O."""

    def rank(self, endpoints: Sequence[Endpoint], request: InferenceRequest) -> list[Endpoint]: ...


def _split(endpoints: Sequence[Endpoint]) -> tuple[list[Endpoint], list[Endpoint]]:
    routable = [endpoint for endpoint in endpoints if endpoint.routable]
    ejected = [endpoint for endpoint in endpoints if not endpoint.routable]
    return routable, ejected


class RoundRobinScheduler:
    """Rotates through routable endpoints; ejected ones go last."""

    def __init__(self) -> None:
        self._turn = 0

    def rank(self, endpoints: Sequence[Endpoint], request: InferenceRequest) -> list[Endpoint]:
        routable, ejected = _split(endpoints)
        if routable:
            start = self._turn % len(routable)
            self._turn += 1
            routable = routable[start:] + routable[:start]
        return routable + ejected


class LeastInFlightScheduler:
    """Fewest in-flight requests per unit of weight first; ties broken by rotation."""

    def __init__(self) -> None:
        self._turn = 0

    def rank(self, endpoints: Sequence[Endpoint], request: InferenceRequest) -> list[Endpoint]:
        routable, ejected = _split(endpoints)
        count = len(routable) or 1
        offset = self._turn
        self._turn += 1
        order = {id(endpoint): (index - offset) % count for index, endpoint in enumerate(routable)}
        routable.sort(key=lambda endpoint: (endpoint.in_flight / endpoint.spec.weight, order[id(endpoint)]))
        return routable + ejected


SCHEDULERS: dict[str, Callable[[], Scheduler]] = {
    "least-in-flight": LeastInFlightScheduler,
    "round-robin": RoundRobinScheduler,
}
