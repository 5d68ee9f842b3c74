"""Endpoint scheduling inside a cluster: the seam and the two basic policies.

A :class:`Scheduler` turns a cluster's endpoints and one request into a :class:`Decision`: the
endpoints ranked best first (the attempt loop in ``proxy.py`` tries them in that order), an
optional per-endpoint score breakdown, and two callbacks: ``commit(endpoint)`` once an endpoint
has accepted the request (e.g. record the prompt's prefix blocks for it) and
``observe(endpoint, usage)`` when the answer's usage is known (e.g. compare predicted with
reported ``cached_tokens``). ``schedule`` may await (data producers with a deadline); ranking
itself stays pure. Policies are registered by kebab-case name in :data:`SCHEDULERS`, which
``[routing] policy`` selects.

Policies:
    ``least-in-flight``: routable endpoints ordered by ``in_flight / weight``; ties rotate so
        that an idle cluster still spreads requests.
    ``round-robin``: routable endpoints in rotating order, ignoring load.

Unhealthy (ejected) endpoints are ranked only when nothing else is left, so a cluster whose
endpoints all failed their checks is still tried rather than refused outright.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.endpoints.model import Endpoint
from gateway.protocol.openai import InferenceRequest


@dataclass
class Decision:
    """A scheduling decision for one request.

    Attributes:
        ranked: endpoints to try, best first.
        breakdown: per endpoint name, per scorer name, a score in [0, 1] (may be empty).
    """

    ranked: list[Endpoint]
    breakdown: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def commit(self, endpoint: Endpoint) -> None:
        """``endpoint`` accepted the request (its response headers arrived with a 2xx)."""

    def observe(self, endpoint: Endpoint, usage: Mapping[str, Any] | None) -> None:
        """The request finished successfully on ``endpoint`` with this ``usage`` (or None)."""


class Scheduler(Protocol):
    """Schedules one request over a cluster's endpoints."""

    async def schedule(self, endpoints: Sequence[Endpoint], request: InferenceRequest) -> Decision: ...


class _Ranking:
    """Adapts a pure ``rank`` function to the :class:`Scheduler` protocol."""

    def rank(self, endpoints: Sequence[Endpoint], request: InferenceRequest) -> list[Endpoint]:
        raise NotImplementedError

    async def schedule(self, endpoints: Sequence[Endpoint], request: InferenceRequest) -> Decision:
        return Decision(self.rank(endpoints, request))


def _split(endpoints: Sequence[Endpoint]) -> tuple[list[Endpoint], list[Endpoint]]:
    """(routable, ejected); draining endpoints are in neither: they take no new requests."""
    routable = [endpoint for endpoint in endpoints if endpoint.routable]
    ejected = [endpoint for endpoint in endpoints if not endpoint.routable and not endpoint.draining]
    return routable, ejected


class RoundRobinScheduler(_Ranking):
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


class LeastInFlightScheduler(_Ranking):
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
