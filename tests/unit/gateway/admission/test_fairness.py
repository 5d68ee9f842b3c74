"""Fair shares of a busy cluster (table and hypothesis tests) and the gate spilling over-share keys first."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.admission.decision import Action
from gateway.admission.fairness import fair_shares, over_share, share_state
from gateway.admission.gate import AdmissionGate, Ask
from gateway.admission.queue import AdmissionQueue
from gateway.admission.saturation import EndpointLoad
from gateway.config.admission import AdmissionKeySettings, AdmissionSettings
from tests.unit.gateway.admission.test_queue import FakeTime


@pytest.mark.parametrize(
    ("demand", "weight", "capacity", "shares"),
    [
        ({"loud": 10, "quiet": 2}, {}, 8, {"loud": 6, "quiet": 2}),  # quiet asks less than half: all of it
        ({"loud": 10, "quiet": 6}, {}, 8, {"loud": 4, "quiet": 4}),
        ({"loud": 10, "quiet": 6}, {"loud": 3}, 8, {"loud": 6, "quiet": 2}),  # weights 3:1
        ({"a": 1, "b": 1}, {}, 8, {"a": 1, "b": 1}),  # room for everyone
        ({"a": 5, "b": 0}, {}, 8, {"a": 5, "b": 0}),
        ({"a": 3, "b": 3, "c": 3}, {}, 6, {"a": 2, "b": 2, "c": 2}),
        ({"a": 3}, {}, 0, {"a": 0}),
    ],
)
def test_fair_shares(demand: dict, weight: dict, capacity: float, shares: dict) -> None:
    assert fair_shares(demand, weight, capacity) == pytest.approx(shares)


@pytest.mark.parametrize(
    ("key", "demand", "over"),
    [
        ("loud", {"loud": 6, "quiet": 2}, True),    # 7 > its share 6
        ("quiet", {"loud": 6, "quiet": 2}, False),  # 3 <= its share 3
        ("quiet", {"loud": 4, "quiet": 4}, True),   # 5 > 4
        ("loud", {"loud": 8}, False),               # alone: nobody to be fair to
        ("new", {"loud": 8}, False),                # a newcomer is under its share
        ("loud", {"loud": 2, "quiet": 1}, False),   # the cluster has room for both
    ],
)
def test_over_share(key: str, demand: dict, over: bool) -> None:
    assert over_share(key, demand, {}, 8.0) is over


@pytest.mark.parametrize(("key", "demand", "state"), [
    ("loud", {"loud": 6, "quiet": 2}, "over"), ("quiet", {"loud": 6, "quiet": 2}, "under"),
    ("loud", {"loud": 8}, None), ("loud", {"loud": 8, "quiet": 0}, None), ("new", {"loud": 8}, "under"),
])
def test_share_state(key: str, demand: dict, state: str | None) -> None:
    assert share_state(key, demand, {}, 8.0) == state


DEMANDS = st.dictionaries(st.sampled_from("abcde"), st.integers(0, 20), min_size=1)
WEIGHTS = st.dictionaries(st.sampled_from("abcde"), st.floats(0.1, 10.0))


@settings(max_examples=300, deadline=None)
@given(DEMANDS, WEIGHTS, st.floats(0.0, 60.0))
def test_shares_are_weighted_max_min(demand: dict, weight: dict, capacity: float) -> None:
    shares = fair_shares(demand, weight, capacity)
    assert set(shares) == set(demand)
    assert sum(shares.values()) == pytest.approx(min(capacity, sum(demand.values())), abs=1e-6)
    for key, share in shares.items():
        assert -1e-9 <= share <= demand[key] + 1e-9
    per_weight = {k: shares[k] / weight.get(k, 1.0) for k in demand}
    for key in demand:
        if shares[key] < demand[key] - 1e-6:  # held below its demand: nobody has more per weight
            assert all(per_weight[other] <= per_weight[key] + 1e-6 for other in demand)


def _rounds(demand: dict, weight: dict, capacity: float) -> dict[str, float]:
    """Textbook water-filling in rounds (every key that fits the unit is capped, then the unit again)."""
    shares = {key: 0.0 for key in demand}
    active = {key for key, asked in demand.items() if asked > 0.0}
    left = max(0.0, capacity)
    while active and left > 1e-12:
        unit = left / sum(weight.get(key, 1.0) for key in active)
        capped = [key for key in active if demand[key] <= unit * weight.get(key, 1.0) + 1e-12]
        if not capped:
            for key in active:
                shares[key] = unit * weight.get(key, 1.0)
            break
        for key in capped:
            shares[key] = float(demand[key])
            left -= demand[key]
            active.discard(key)
    return shares


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.text("abcdefgh", min_size=1, max_size=2), st.floats(0.0, 50.0), min_size=1, max_size=30),
    st.dictionaries(st.text("abcdefgh", min_size=1, max_size=2), st.floats(0.1, 10.0)),
    st.floats(0.0, 300.0),
)
def test_one_sorted_pass_gives_the_rounds_shares(demand: dict, weight: dict, capacity: float) -> None:
    assert fair_shares(demand, weight, capacity) == pytest.approx(_rounds(demand, weight, capacity), abs=1e-6)


def test_many_keys_with_spread_demands_share_in_one_pass() -> None:
    demand = {f"k{i}": float(i) for i in range(1, 2001)}  # the rounds would cap one key per round
    shares = fair_shares(demand, {}, 1_000_000.0 / 2)
    assert sum(shares.values()) == pytest.approx(500_000.0)
    capped = [k for k in demand if shares[k] == demand[k]]
    assert shares["k2000"] < 2000.0 and len(capped) > 0
    unit = shares["k2000"]
    assert all(shares[k] == pytest.approx(min(demand[k], unit)) for k in demand)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 30), st.integers(0, 30), st.integers(1, 32))
def test_a_key_under_its_equal_share_is_never_over(loud: int, quiet: int, capacity: int) -> None:
    if quiet + 1 <= capacity / 2:
        assert not over_share("quiet", {"loud": loud, "quiet": quiet}, {}, float(capacity))


class World:
    """``fast``: one endpoint of 4 slots (engine full); ``managed`` free; leases taken through the gate.
    The wait limit (0.5 s) is under the predicted wait of a full ``fast`` (1.4 s): it is saturated."""

    def __init__(self) -> None:
        self.time = FakeTime()
        self.settings = AdmissionSettings(enabled=True, max_queue_wait_s=0.5,
                                          keys={"loud": AdmissionKeySettings(), "quiet": AdmissionKeySettings()})
        self.queue = AdmissionQueue(clock=self.time.clock, timer=self.time.timer)
        self.gate = AdmissionGate(
            lambda: self.settings, self.queue,
            loads=lambda c: [EndpointLoad(float(sum(self.gate.inflight(c).values())), 4.0, "full")],
            service_s=lambda c: 2.0,
        )


async def test_saturated_the_key_over_its_share_spills_and_the_one_under_it_queues() -> None:
    world = World()
    leases = [world.gate.lease("fast", "loud") for _ in range(3)] + [world.gate.lease("fast", "quiet")]
    assert world.gate.inflight("fast") == {"loud": 3, "quiet": 1}
    loud = await world.gate.admit(Ask("fast", "loud", spill_to=["managed"]))
    assert (loud.action, loud.cluster, loud.reason) == (Action.SPILL, "managed", "spill_saturated")
    quiet = asyncio.ensure_future(world.gate.admit(Ask("fast", "quiet", spill_to=["managed"])))
    await asyncio.sleep(0)
    assert world.queue.waiting_by_key("fast") == {"quiet": 1}  # saturated, but within its share: it waits
    leases[0].drop()  # a loud request ends: its slot goes to the quiet waiter
    decision = await quiet
    assert (decision.action, decision.reason) == (Action.ADMIT, "queued")
    world.gate.lease("fast", "quiet")  # as the director takes it
    assert world.gate.inflight("fast") == {"loud": 2, "quiet": 2}
    explained = world.gate.judge(Ask("fast", "loud", spill_to=["managed"])).render()
    assert (explained["action"], explained["fair_share"]) == ("spill", "over")  # 3 > its share 2 of 4
    newcomer = world.gate.judge(Ask("fast", "new", spill_to=["managed"])).render()
    assert (newcomer["action"], newcomer["fair_share"], newcomer["spill_after_ms"]) == ("queue", "under", 500.0)


async def test_without_a_spill_target_a_saturated_cluster_sheds_whatever_the_share() -> None:
    world = World()
    for _ in range(3):
        world.gate.lease("fast", "loud")
    world.gate.lease("fast", "quiet")
    for key in ("loud", "quiet"):
        decision = await world.gate.admit(Ask("fast", key))
        assert (decision.action, decision.status) == (Action.SHED, 503)
    assert world.queue.depth("fast") == 0
