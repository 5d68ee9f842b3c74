"""The basic policies are built-in profiles of the one framework (``least-in-flight``, ``round-robin``)."""

from gateway.endpoints.model import Endpoint, EndpointSpec, Health
from gateway.protocol.openai import Operation, parse_request
from gateway.config import BASIC_POLICIES as SCHEDULERS
from tests.unit.gateway.scheduling.support import basic

REQUEST = parse_request(Operation.COMPLETION, b'{"model": "m", "prompt": "x"}')


def endpoints(*in_flight: int, weights: tuple[float, ...] | None = None) -> list[Endpoint]:
    made = []
    for index, count in enumerate(in_flight):
        weight = weights[index] if weights else 1.0
        endpoint = Endpoint(EndpointSpec(f"e{index}", "c", f"http://h{index}/v1", "m", weight=weight))
        endpoint.in_flight = count
        made.append(endpoint)
    return made


def names(ranked: list[Endpoint]) -> list[str]:
    return [endpoint.name for endpoint in ranked]


def test_least_in_flight_orders_by_load_per_weight() -> None:
    ranked = basic("least-in-flight").rank(endpoints(3, 0, 2), REQUEST)
    assert names(ranked) == ["e1", "e2", "e0"]
    weighted = basic("least-in-flight").rank(endpoints(4, 3, weights=(4.0, 1.0)), REQUEST)
    assert names(weighted) == ["e0", "e1"]


def test_least_in_flight_rotates_ties() -> None:
    scheduler = basic("least-in-flight")
    group = endpoints(0, 0, 0)
    firsts = [scheduler.rank(group, REQUEST)[0].name for _ in range(6)]
    assert sorted(set(firsts)) == ["e0", "e1", "e2"]


def test_round_robin_rotates_regardless_of_load() -> None:
    scheduler = basic("round-robin")
    group = endpoints(9, 0, 0)
    assert [scheduler.rank(group, REQUEST)[0].name for _ in range(4)] == ["e0", "e1", "e2", "e0"]


def test_ejected_endpoints_go_last_but_stay_rankable() -> None:
    group = endpoints(0, 5)
    group[0].health = Health.UNHEALTHY
    for scheduler in (basic("least-in-flight"), basic("round-robin")):
        assert names(scheduler.rank(group, REQUEST)) == ["e1", "e0"]
    group[1].health = Health.UNHEALTHY
    assert names(basic("least-in-flight").rank(group, REQUEST)) == ["e0", "e1"]


def test_registry_names() -> None:
    assert set(SCHEDULERS) == {"least-in-flight", "round-robin"}


async def test_schedule_wraps_rank_in_a_decision() -> None:
    decision = await basic("least-in-flight").schedule(endpoints(1, 0), REQUEST)
    assert names(decision.ranked) == ["e1", "e0"]
    assert decision.breakdown == {}


def test_draining_endpoints_are_never_ranked() -> None:
    group = endpoints(0, 0)
    group[0].draining = True
    for scheduler in (basic("least-in-flight"), basic("round-robin")):
        assert names(scheduler.rank(group, REQUEST)) == ["e1"]
