"""Managed workers as endpoints: the supervisor's events become registry changes.

:class:`ManagedEndpoints` is a ``backends.workers.supervisor.WorkerListener``. For each worker:

- **ready** -> an :class:`Endpoint` (``source="managed"``, named after the worker, in ``cluster``)
  is added, already marked healthy (the supervisor saw ``/health`` answer 200);
- **draining** -> ``endpoint.draining = True``: the scheduler sends it nothing new, and
  :meth:`ManagedEndpoints.drain` returns once ``in_flight`` is 0 (or after ``timeout_s``);
- anything else (stopping, stopped, failed, relaunching) -> the endpoint is removed. Requests
  in flight keep their snapshot and finish (or fail over); a worker that becomes ready again is
  re-admitted as a fresh endpoint, with clean health and circuit state.

Only endpoints this adapter added are ever touched; a name already taken by a configured
endpoint is refused (logged), never replaced. ``sleep`` and ``clock`` are injected for tests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from gateway.endpoints.model import Endpoint, EndpointSpec
from gateway.config import CircuitSettings, HealthSettings
from gateway.endpoints.registry import EndpointRegistry, new_endpoint

if TYPE_CHECKING:
    from backends.workers.status import WorkerStatus

log = logging.getLogger("kvgate.managed")

EndpointFactory = Callable[[EndpointSpec], Endpoint]


class ManagedEndpoints:
    """Mirrors supervised workers into ``registry`` under ``cluster``."""

    def __init__(self, registry: EndpointRegistry, cluster: str, *, make_endpoint: EndpointFactory | None = None,
                 poll_s: float = 0.05, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.registry = registry
        self.cluster = cluster
        self._make = make_endpoint or (lambda spec: Endpoint(spec, source="managed"))
        self._poll_s = poll_s
        self._sleep = sleep
        self._clock = clock
        self._names: set[str] = set()

    @classmethod
    def for_settings(
        cls, registry: EndpointRegistry, health: HealthSettings, circuit: CircuitSettings, cluster: str, **kwargs: Any
    ) -> ManagedEndpoints:
        """An adapter whose endpoints use the configured health thresholds (``[health]``) and
        circuit breaker (``[circuit]``)."""
        def make(spec: EndpointSpec) -> Endpoint:
            return new_endpoint(spec, health, circuit, source="managed")

        return cls(registry, cluster, make_endpoint=make, **kwargs)

    @property
    def names(self) -> frozenset[str]:
        """Endpoints currently added by this adapter."""
        return frozenset(self._names)

    async def worker_changed(self, status: WorkerStatus) -> None:
        """Apply one worker status."""
        phase = status.phase.value
        if phase == "ready":
            self._admit(status)
        elif phase == "draining":
            endpoint = self._managed(status.name)
            if endpoint is not None:
                endpoint.draining = True
        else:
            self._retire(status.name, phase)

    async def drain(self, status: WorkerStatus, timeout_s: float) -> None:
        """Stop new requests to the worker's endpoint; wait until none is in flight (bounded)."""
        endpoint = self._managed(status.name)
        if endpoint is None:
            return
        endpoint.draining = True
        deadline = self._clock() + timeout_s
        while endpoint.in_flight > 0 and self._clock() < deadline:
            await self._sleep(self._poll_s)
        if endpoint.in_flight > 0:
            log.warning("endpoint %s: %d request(s) still in flight after %g s of drain",
                        endpoint.name, endpoint.in_flight, timeout_s)

    def _managed(self, name: str) -> Endpoint | None:
        return self.registry.find(name) if name in self._names else None

    def _admit(self, status: WorkerStatus) -> None:
        existing = self.registry.find(status.name)
        if existing is not None and status.name in self._names:
            self.registry.remove(status.name)  # a stale one from a previous generation
        elif existing is not None:
            log.error("managed worker %s: an endpoint of that name exists already; not admitted", status.name)
            return
        spec = status.spec
        endpoint = self._make(EndpointSpec(name=status.name, cluster=self.cluster, base_url=spec.base_url,
                                           served_model=spec.served_model_name,
                                           health_url=f"{spec.origin}/health"))
        endpoint.record_check(True)
        self.registry.add(endpoint)
        self._names.add(status.name)
        log.info("endpoint %s: admitted (managed worker ready at %s)", status.name, spec.base_url)

    def _retire(self, name: str, phase: str) -> None:
        if name not in self._names:
            return
        self._names.discard(name)
        removed = self.registry.remove(name)
        if removed is not None:
            log.info("endpoint %s: removed (managed worker %s)", name, phase)
