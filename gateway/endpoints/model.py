"""Endpoints: the static spec from config and the live state the gateway keeps about each.

An :class:`Endpoint` is one OpenAI-compatible server in a cluster. Its spec never changes; its
live state (in-flight requests, health) is owned here and changed only through the methods
below, so every path that takes an in-flight slot gives it back (see ``upstream/streaming.py``).

Health combines active checks (``endpoints/health.py``) with passive request outcomes: after
``unhealthy_threshold`` consecutive failures the endpoint is ejected; ``healthy_threshold``
consecutive successful checks re-admit it. A client's cancel or a client error (4xx) never
counts as a failure.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from urllib.parse import urlsplit


class Health(enum.Enum):
    UNKNOWN = "unknown"  # not checked yet: routable, but /ready does not count it
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    """What config says about one endpoint.

    Attributes:
        name: unique endpoint name.
        cluster: the cluster it belongs to.
        base_url: OpenAI base URL without trailing slash (``http://host:port/v1``).
        served_model: the model name sent to it.
        api_key: the endpoint's own credential (from ``api_key_env``), or None.
        health_url: URL of its liveness check.
        weight: relative capacity (> 0).
    """

    name: str
    cluster: str
    base_url: str
    served_model: str
    api_key: str | None = None
    health_url: str | None = None
    weight: float = 1.0

    def effective_health_url(self) -> str:
        if self.health_url:
            return self.health_url
        parts = urlsplit(self.base_url)
        return f"{parts.scheme}://{parts.netloc}/health"


class Endpoint:
    """Live state of one endpoint. Not thread-safe; used from the event loop only."""

    __slots__ = (
        "spec", "in_flight", "health", "draining", "_failures", "_successes", "_unhealthy_after", "_healthy_after", "last_error",
    )

    def __init__(self, spec: EndpointSpec, *, unhealthy_threshold: int = 2, healthy_threshold: int = 1) -> None:
        self.spec = spec
        self.in_flight = 0
        self.health = Health.UNKNOWN
        self.draining = False  # no new requests; in-flight ones finish
        self.last_error: str | None = None
        self._failures = 0
        self._successes = 0
        self._unhealthy_after = unhealthy_threshold
        self._healthy_after = healthy_threshold

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def routable(self) -> bool:
        """May take new requests: not ejected and not draining."""
        return self.health is not Health.UNHEALTHY and not self.draining

    def acquire(self) -> None:
        self.in_flight += 1

    def release(self) -> None:
        self.in_flight -= 1

    def record_success(self) -> None:
        """A request or check succeeded: reset the failure run."""
        self._failures = 0
        if self.health is Health.UNKNOWN:
            self.health = Health.HEALTHY

    def record_failure(self, reason: str) -> None:
        """A request or check failed; eject after ``unhealthy_threshold`` in a row."""
        self.last_error = reason
        self._successes = 0
        self._failures += 1
        if self._failures >= self._unhealthy_after:
            self.health = Health.UNHEALTHY

    def record_check(self, ok: bool, reason: str | None = None) -> None:
        """Outcome of an active health check."""
        if not ok:
            self.record_failure(reason or "health check failed")
            return
        self._successes += 1
        if self.health is not Health.UNHEALTHY or self._successes >= self._healthy_after:
            self.health = Health.HEALTHY
            self._failures = 0

    def __repr__(self) -> str:
        return f"Endpoint({self.name!r}, {self.health.value}, in_flight={self.in_flight})"
