"""Endpoint scheduling inside a cluster: the seam (:class:`Scheduler`) and what it returns (:class:`Decision`).

A :class:`Scheduler` turns a cluster's endpoints and one request into a :class:`Decision`: the
endpoints ranked best first (the attempt loop in ``proxy.py`` tries them in that order), an
optional per-endpoint score breakdown, and two callbacks: ``commit(endpoint)`` once an endpoint
has accepted the request (e.g. record the prompt's prefix blocks for it) and
``observe(endpoint, usage)`` when the answer's usage is known (e.g. compare predicted with
reported ``cached_tokens``). ``schedule`` may await (data producers with a deadline); ranking
itself stays pure.

There is one implementation, :class:`~gateway.scheduling.profile.ProfileScheduler`: every policy
``[routing] policy`` names is a profile, the basic ``least-in-flight`` and ``round-robin`` included
(``gateway/config/scheduling.py``: ``BUILTIN_PROFILES``). Its plain :class:`Decision` (ranking only,
commit and observe do nothing) is what those open-loop profiles return.

Unhealthy (ejected) endpoints are ranked only when nothing else is left, so a cluster whose
endpoints all failed their checks is still tried rather than refused outright.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
