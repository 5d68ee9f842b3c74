"""Endpoints: the static spec from config and the live state the gateway keeps about each.

An :class:`Endpoint` is one OpenAI-compatible server in a cluster. Its spec never changes; its
live state (in-flight requests, health) is owned here and changed only through the methods
below, so every path that takes an in-flight slot gives it back (see ``relay.py``).

Two independent guards decide whether an endpoint takes new requests (``routable``):

* **health**, from active checks (``endpoints/health.py``): ``unhealthy_threshold`` failed checks
  in a row eject it, ``healthy_threshold`` passing checks in a row re-admit it;
* **the circuit breaker**, from request outcomes (``endpoints/circuit.py``): open after
  consecutive failures or a failure ratio, one half-open probe after the cooldown.

A third, the **rate-limit cooldown**, is the endpoint's own word: a 429 with ``Retry-After``
(``cool_down``) takes it out of rotation until then. It is no failure (the breaker does not
hear of it) and ends by itself; while it lasts, ``cooling_until`` says until when.

A client's cancel or a client error (4xx) counts as neither success nor failure.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from gateway.endpoints.circuit import BreakerPolicy, CircuitBreaker, CircuitState


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
        kv_events: ZMQ address of the worker's KV-event publisher the gateway connects to
            (precise mode, ``scheduling/kv_subscriber.py``), or None.
    """

    name: str
    cluster: str
    base_url: str
    served_model: str
    api_key: str | None = None
    health_url: str | None = None
    weight: float = 1.0
    kv_events: str | None = None

    def effective_health_url(self) -> str:
        if self.health_url:
            return self.health_url
        parts = urlsplit(self.base_url)
        return f"{parts.scheme}://{parts.netloc}/health"


class Endpoint:
    """Live state of one endpoint. Not thread-safe; used from the event loop only."""

    __slots__ = (
        "spec", "in_flight", "health", "draining", "stalled", "breaker", "source", "last_error",
        "_check_failures", "_check_successes", "_unhealthy_after", "_healthy_after", "_clock", "_cool_until",
    )

    def __init__(
        self,
        spec: EndpointSpec,
        *,
        unhealthy_threshold: int = 2,
        healthy_threshold: int = 1,
        breaker: BreakerPolicy = BreakerPolicy(),
        clock: Callable[[], float] = time.monotonic,
        source: str = "config",
    ) -> None:
        self.spec = spec
        self.in_flight = 0
        self.health = Health.UNKNOWN
        self.draining = False  # no new requests; in-flight ones finish
        self.stalled = False  # answers /health but generates nothing (endpoints/stall.py)
        self.breaker = CircuitBreaker(breaker, clock)
        self.source = source  # config | admin | managed
        self.last_error: str | None = None
        self._check_failures = 0
        self._check_successes = 0
        self._unhealthy_after = unhealthy_threshold
        self._healthy_after = healthy_threshold
        self._clock = clock
        self._cool_until = 0.0

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def routable(self) -> bool:
        """May take new requests: not ejected by checks, not stalled, not draining, not cooling, breaker not open."""
        breaker = self.breaker
        return (
            self.health is not Health.UNHEALTHY and not self.stalled and not self.draining
            and (not self._cool_until or not self.cooling_until)  # no 429 cooldown set: nothing to expire
            and (breaker.state is CircuitState.CLOSED or breaker.available())  # closed: available, nothing to advance
        )

    @property
    def cooling_until(self) -> float:
        """Clock time (seconds, the endpoint's clock) until which a 429's ``Retry-After`` holds it; 0.0 when not cooling."""
        until = self._cool_until
        if until and until <= self._clock():
            self._cool_until = until = 0.0
        return until

    def cool_down(self, seconds: float) -> None:
        """Take the endpoint out of rotation for ``seconds`` (a 429's ``Retry-After``); never shortens one under way."""
        if seconds > 0:
            self._cool_until = max(self._cool_until, self._clock() + seconds)

    @property
    def circuit(self) -> CircuitState:
        return self.breaker.state

    def acquire(self) -> None:
        self.in_flight += 1

    def release(self) -> None:
        self.in_flight -= 1

    def record_success(self) -> None:
        """A request succeeded."""
        self.breaker.record_success()
        if self.health is Health.UNKNOWN:
            self.health = Health.HEALTHY

    def record_failure(self, reason: str) -> None:
        """A request failed for the endpoint's own reasons (never a client's 4xx or cancel)."""
        self.last_error = reason
        self.breaker.record_failure()

    def record_check(self, ok: bool, reason: str | None = None) -> None:
        """Outcome of an active health check."""
        if not ok:
            self.last_error = reason or "health check failed"
            self._check_successes = 0
            self._check_failures += 1
            if self._check_failures >= self._unhealthy_after:
                self.health = Health.UNHEALTHY
            return
        self._check_failures = 0
        self._check_successes += 1
        if self.health is not Health.UNHEALTHY or self._check_successes >= self._healthy_after:
            self.health = Health.HEALTHY

    def __repr__(self) -> str:
        return f"Endpoint({self.name!r}, {self.health.value}, {self.breaker.state.value}, in_flight={self.in_flight})"
