"""The director with admission on: every admitted request hands its lease back exactly once.

The attempt loop's table (``test_director.py``: failover, 429, empty body, a stream's first-event
error, a break and its continuation, client cancels, the client's 4xx, every endpoint failing) is
replayed with an admission gate whose ``finished`` is recorded: whatever the path, the gate hears
``finished(cluster)`` once per request, after its last attempt let go of its slot.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.admission.gate import AdmissionGate, Ask, Lease
from gateway.admission.queue import AdmissionQueue
from gateway.attempt import Opener
from gateway.closeout import CloseOut
from gateway.config import AdmissionSettings
from gateway.proxy import Proxy
from tests.unit.gateway import test_director as table


class Recording(AdmissionGate):
    """A gate that admits everything (no endpoint load is reported) and records ``finished``."""

    def __init__(self) -> None:
        super().__init__(lambda: AdmissionSettings(enabled=True), AdmissionQueue(), loads=lambda c: [], service_s=lambda c: 1.0)
        self.calls: list[str] = []
        self.in_flight_at_finish: list[int] = []
        self.registry: Any = None

    def finished(self, cluster: str, key: str = "") -> None:
        self.calls.append(cluster)
        self.in_flight_at_finish.append(sum(e.in_flight for e in self.registry.cluster(cluster)))
        super().finished(cluster, key)


@pytest.mark.parametrize("row", table.ROWS, ids=[row.name for row in table.ROWS])
async def test_every_request_returns_its_lease_once(row: table.Row, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = Recording()

    def director(container: Any, routing: Any, upstream: Any, clock: Any, waited: list[float]) -> Proxy:
        async def sleep(seconds: float) -> None:
            waited.append(seconds)

        ops = container.ops
        gate.registry = container.registry
        return Proxy(
            selector=container.selector, gate=ops.gate, catalog=container.catalog, registry=container.registry,
            scheduler=routing.scheduler,
            opener=Opener(upstream, clock=clock, max_retry_after_s=5.0, max_cooldown_s=60.0, sleep=sleep, max_attempts=3),
            closeout=CloseOut(container.metrics, ops.pricing, ops.gate, ops.requests, clock=clock, selector=container.selector),
            metrics=container.metrics, admission=gate,
        )

    monkeypatch.setattr(table, "director", director)
    seen = await asyncio.wait_for(table.serve(row), 10)
    assert seen["a"].in_flight == 0 and seen["b"].in_flight == 0
    assert gate.calls == ["c"], "the lease was not returned exactly once"
    assert gate.in_flight_at_finish == [0], "the lease was returned while an attempt still held a slot"
    assert seen["exchange"].queued_s == 0.0


def test_a_lease_tells_the_gate_once_when_its_last_holder_lets_go() -> None:
    calls: list[tuple[str, str]] = []
    gate = AdmissionGate(lambda: AdmissionSettings(enabled=True), AdmissionQueue(), loads=lambda c: [], service_s=lambda c: 1.0)
    gate.finished = lambda cluster, key="": calls.append((cluster, key))  # type: ignore[method-assign]
    lease = gate.lease("c", "k")
    assert isinstance(lease, Lease) and not lease.returned
    lease.hold()  # an attempt
    lease.drop()  # the exchange finished first (a relay ends its attempt after)
    assert calls == []
    lease.drop()  # the attempt's end
    assert calls == [("c", "k")] and lease.returned
    lease.hold()
    lease.drop()
    lease.drop()
    assert calls == [("c", "k")], "told twice"


def test_the_admission_question_reads_the_route_and_the_priority_header() -> None:
    from types import SimpleNamespace

    from gateway.selection.route import Route

    route = Route("r", ("busy", "spare", "other"), spill_to=("spare", "gone"), max_queue_wait_s=0.5)
    routed: Any = SimpleNamespace(views={"busy": SimpleNamespace(wait_s=0.0)}, limits=SimpleNamespace(budget_left_usd=2.0))
    ask = Proxy.admission_ask(route, "team", {"x-priority": "batch"}, routed)
    assert ask == Ask("busy", "team", "batch", 0.5, ["spare"], allow_spill=True, budget_left_usd=2.0, known_wait_s=0.0)
    off = Proxy.admission_ask(Route("r", ("busy",), failover=False, spill_to=("spare",)), "team", {}, routed)
    assert off.spill_to == [] and off.allow_spill is False
