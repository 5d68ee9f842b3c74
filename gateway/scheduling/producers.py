"""[io] Data producers and the deadline-bound runner: the only routing code that awaits.

``state``: one :meth:`~gateway.state.base.StateStore.lookup` (prefix matches, affinity and other
replicas' in-flight counts in one round trip for Redis). When the store can answer without I/O
(:meth:`~gateway.state.base.StateStore.peek`: the memory store, or Redis while it is bypassed)
the producer answers at once through ``produce_now``.

:func:`run_producers` first asks every producer that has ``produce_now`` for an immediate answer
(no task, no timer: about 2 us instead of 8 for a deadline-bound await); the others, and those
answering :data:`PENDING`, run concurrently, each under ``routing.producer_deadline_ms``
(``gateway/deadlines.py``: no extra task or timer for a single producer). A producer that times out or raises
**drops its hint**: the request is scheduled without it (for ``state``: no prefix match, local
in-flight counts) and ``kvgate_routing_producer_failures_total{producer, reason}`` counts it. A
request is never failed by a producer.

:func:`gather_hints` is what a profile calls: the runner's answers, each written by its producer
into its typed field of :class:`~gateway.scheduling.types.Hints`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.deadlines import deadline
from gateway.endpoints.model import Endpoint
from gateway.observability.metrics import RoutingMetrics
from gateway.scheduling.types import PENDING, Context, DataProducer, Hints
from gateway.state.base import StateStore, StoreView

log = logging.getLogger("kvgate.routing")


class StateProducer:
    """The ``state`` hint: a :class:`~gateway.state.base.StoreView` (``Hints.state``)."""

    def __init__(self, store: StateStore) -> None:
        self._store = store

    def write(self, hints: Hints, value: StoreView) -> None:
        hints.state = value

    def produce_now(self, ctx: Context, endpoints: Sequence[Endpoint]) -> Any:
        view = self._store.peek([e.spec.name for e in endpoints], ctx.key)
        return PENDING if view is None else view

    async def produce(self, ctx: Context, endpoints: Sequence[Endpoint]) -> StoreView:
        return await self._store.lookup([e.spec.name for e in endpoints], ctx.key)


async def _guarded(
    name: str, producer: DataProducer, ctx: Context, endpoints: Sequence[Endpoint], deadline_s: float,
    metrics: RoutingMetrics,
) -> tuple[str, Any]:
    try:
        with deadline(deadline_s):
            return name, await producer.produce(ctx, endpoints)
    except TimeoutError:
        metrics.producer_failures.labels(name, "timeout").inc()
    except Exception as error:  # a producer must never fail the request
        _failed(name, error, metrics)
    return name, None


def _failed(name: str, error: Exception, metrics: RoutingMetrics) -> None:
    metrics.producer_failures.labels(name, "error").inc()
    log.warning("producer %s failed: %r", name, error)


async def run_producers(
    producers: Mapping[str, DataProducer], ctx: Context, endpoints: Sequence[Endpoint], deadline_s: float,
    metrics: RoutingMetrics,
) -> dict[str, Any]:
    """Hints by producer name; a failed or late producer's hint is absent."""
    hints: dict[str, Any] = {}
    waiting: list[tuple[str, DataProducer]] = []
    for name, producer in producers.items():
        now = getattr(producer, "produce_now", None)
        if now is None:
            waiting.append((name, producer))
            continue
        try:
            value = now(ctx, endpoints)
        except Exception as error:  # a producer must never fail the request
            _failed(name, error, metrics)
            continue
        if value is PENDING:
            waiting.append((name, producer))
        elif value is not None:
            hints[name] = value
    if not waiting:
        return hints
    if len(waiting) == 1:
        name, producer = waiting[0]
        results = [await _guarded(name, producer, ctx, endpoints, deadline_s, metrics)]
    else:
        results = await asyncio.gather(*(_guarded(n, p, ctx, endpoints, deadline_s, metrics) for n, p in waiting))
    hints.update((name, value) for name, value in results if value is not None)
    return hints


async def gather_hints(
    producers: Mapping[str, DataProducer], ctx: Context, endpoints: Sequence[Endpoint], deadline_s: float,
    metrics: RoutingMetrics,
) -> Hints:
    """The typed hints of one request: :func:`run_producers`, each answer written by its producer."""
    hints = Hints()
    if not producers:
        return hints
    for name, value in (await run_producers(producers, ctx, endpoints, deadline_s, metrics)).items():
        try:
            producers[name].write(hints, value)
        except Exception as error:  # a producer must never fail the request
            _failed(name, error, metrics)
            continue
        hints.answered(name)
    return hints
