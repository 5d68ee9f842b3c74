"""The admission gate: the director's step over fake live state (no app, no sockets, no sleeps)."""

from __future__ import annotations

import asyncio

import pytest

from gateway.admission.decision import Action
from gateway.admission.gate import AdmissionGate, Ask
from gateway.admission.queue import AdmissionQueue
from gateway.admission.saturation import EndpointLoad
from gateway.config.admission import AdmissionSettings
from tests.unit.gateway.admission.test_queue import FakeTime


class World:
    """Occupancy per cluster (one endpoint of 4 slots, engine full) and a gate over it."""

    def __init__(self, settings: AdmissionSettings | None = None, **queue_options: object) -> None:
        self.occupied = {"fast": 0.0, "managed": 0.0}
        self.time = FakeTime()
        self.settings = settings or AdmissionSettings(enabled=True, max_queue_wait_s=5.0)
        self.queue = AdmissionQueue(clock=self.time.clock, timer=self.time.timer, **queue_options)  # type: ignore[arg-type]
        self.gate = AdmissionGate(
            lambda: self.settings, self.queue,
            loads=lambda c: [EndpointLoad(self.occupied[c], 4.0, "full")],
            service_s=lambda c: 2.0, price_usd=lambda c: 0.5 if c == "managed" else 0.01,
        )


async def test_off_admits_everything_without_looking() -> None:
    world = World(AdmissionSettings())
    world.occupied["fast"] = 100
    decision = await world.gate.admit(Ask("fast", "k"))
    assert (decision.action, decision.cluster, decision.reason) == (Action.ADMIT, "fast", "free")


async def test_free_slot_admits_at_once() -> None:
    world = World()
    assert (await world.gate.admit(Ask("fast", "k"))).reason == "free"


async def test_a_busy_cluster_queues_until_a_slot_is_handed_on() -> None:
    world = World()
    world.occupied["fast"] = 4
    waiter = asyncio.ensure_future(world.gate.admit(Ask("fast", "k")))
    await asyncio.sleep(0)
    assert world.queue.depth("fast") == 1 and not waiter.done()
    world.time.now = 1.5
    world.gate.finished("fast")
    decision = await waiter
    assert (decision.action, decision.reason, decision.queued_s) == (Action.ADMIT, "queued", 1.5)


async def test_a_timed_out_waiter_spills_or_is_shed() -> None:
    world = World()
    world.occupied["fast"] = 4
    spilled = asyncio.ensure_future(world.gate.admit(Ask("fast", "a", spill_to=["managed"])))
    shed = asyncio.ensure_future(world.gate.admit(Ask("fast", "b")))
    await asyncio.sleep(0)
    world.time.advance(5.0)
    first, second = await spilled, await shed
    assert (first.action, first.cluster, first.reason) == (Action.SPILL, "managed", "spill_saturated")
    assert first.queued_s == 5.0
    assert (second.action, second.status, second.retry_after_s) == (Action.SHED, 503, 1)


async def test_saturated_spills_within_budget_and_sheds_without_it() -> None:
    world = World()
    world.occupied["fast"] = 40
    spill = await world.gate.admit(Ask("fast", "k", spill_to=["managed"], budget_left_usd=1.0))
    assert (spill.action, spill.cluster) == (Action.SPILL, "managed")
    poor = await world.gate.admit(Ask("fast", "k", spill_to=["managed"], budget_left_usd=0.1))
    assert (poor.action, poor.status) == (Action.SHED, 503)
    assert poor.error().headers["Retry-After"] == str(poor.retry_after_s)
    off = await world.gate.admit(Ask("fast", "k", spill_to=["managed"], allow_spill=False))
    assert off.action is Action.SHED


async def test_per_key_bound_is_a_429() -> None:
    world = World(AdmissionSettings(enabled=True, keys={"greedy": {"max_queued": 1}}))
    world.occupied["fast"] = 4
    waiter = asyncio.ensure_future(world.gate.admit(Ask("fast", "greedy")))
    await asyncio.sleep(0)
    refused = await world.gate.admit(Ask("fast", "greedy"))
    assert (refused.action, refused.status) == (Action.SHED, 429)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert world.queue.depth("fast") == 0


def test_judge_has_no_side_effects_and_explains() -> None:
    world = World()
    world.occupied["fast"] = 4
    judgement = world.gate.judge(Ask("fast", "k", header="batch", spill_to=["managed"]))
    assert judgement.decision.action is Action.QUEUE and judgement.priority == 1
    assert judgement.primary is not None and judgement.primary.wait_s > 0
    assert [t.cluster for t in judgement.targets] == ["managed"]
    assert world.queue.depth("fast") == 0


async def test_a_wait_route_selection_already_predicted_as_zero_admits_without_looking() -> None:
    world = World()
    world.occupied["fast"] = 100  # not read
    decision = await world.gate.admit(Ask("fast", "k", known_wait_s=0.0))
    assert (decision.action, decision.reason) == (Action.ADMIT, "free")
    world.occupied["fast"] = 4
    waiter = asyncio.ensure_future(world.gate.admit(Ask("fast", "k")))
    await asyncio.sleep(0)
    queued = world.gate.judge(Ask("fast", "k", known_wait_s=0.0))  # someone waits: no fast path
    assert queued.decision.action is Action.QUEUE
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
