"""Saturation: the predicted wait of a cluster from its endpoints' loads (table tests)."""

from __future__ import annotations

import math

import pytest

from gateway.admission.saturation import EndpointLoad, cluster_saturation, endpoint_load, endpoint_loads
from gateway.endpoints.metrics_parse import EngineStats
from gateway.endpoints.model import Endpoint, EndpointSpec, Health
from gateway.endpoints.stats import Scrape
from gateway.selection.load import queue_wait, slot_wait


def endpoint(name: str, in_flight: int = 0, weight: float = 1.0) -> Endpoint:
    e = Endpoint(EndpointSpec(name, "c", "http://127.0.0.1:1/v1", "m", weight=weight))
    e.in_flight = in_flight
    return e


def scrape(waiting: float, running: float, kv: float | None = None) -> Scrape:
    return Scrape(EngineStats("vllm", waiting=waiting, running=running, kv_usage=kv), at=0.0)


@pytest.mark.parametrize(
    ("in_flight", "stats", "expected"),
    [
        (3, None, EndpointLoad(3.0, 4.0, "unmeasured")),
        (3, scrape(0, 2), EndpointLoad(3.0, 4.0, "open")),  # in-flight beats the engine's count
        (1, scrape(2, 4), EndpointLoad(6.0, 4.0, "full")),  # other replicas' requests count
        (1, scrape(0, 1, kv=0.97), EndpointLoad(1.0, 4.0, "full")),  # a full KV cache is full
        (1, scrape(0, 1, kv=0.5), EndpointLoad(1.0, 4.0, "open")),
        # the gateway holds it at its slots: the engine cannot show anyone waiting, so it is not "open"
        (4, scrape(0, 4), EndpointLoad(4.0, 4.0, "full")),
    ],
)
def test_endpoint_load(in_flight: int, stats: Scrape | None, expected: EndpointLoad) -> None:
    assert endpoint_load(endpoint("a", in_flight), stats, 4, 0.95) == expected


def test_endpoint_loads_skip_unroutable_and_use_weight() -> None:
    down = endpoint("down", 0)
    down.health = Health.UNHEALTHY
    loads = endpoint_loads([endpoint("a", 1, weight=2.0), down], lambda name: None, 4)
    assert loads == [EndpointLoad(1.0, 8.0)]


@pytest.mark.parametrize(
    ("loads", "queued", "limit", "wait", "saturated"),
    [
        ([EndpointLoad(3, 4, "full")], 0, 5.0, 0.0, False),  # a free slot: start now
        ([EndpointLoad(4, 4, "full")], 0, 5.0, slot_wait(1, 4, 8.0, 0.99), True),  # 1 ahead: p99 > 5 s
        ([EndpointLoad(4, 4, "full")], 0, 10.0, slot_wait(1, 4, 8.0, 0.99), False),
        ([EndpointLoad(2, 4, "full")], 3, 5.0, slot_wait(2, 4, 8.0, 0.99), True),  # behind 3 waiters
        ([EndpointLoad(8, 4, "open")], 0, 5.0, slot_wait(5, 4, 8.0, 0.99), False),  # engine says room
        ([EndpointLoad(8, 4)], 0, 5.0, slot_wait(5, 4, 8.0, 0.99), True),  # load model alone
        ([EndpointLoad(4, 4, "full"), EndpointLoad(3, 4, "full")], 0, 1.0, 0.0, False),
        ([EndpointLoad(4, 4, "full"), EndpointLoad(4, 4, "full")], 1, 1.0, slot_wait(2, 8, 8.0, 0.99), True),
    ],
)
def test_cluster_saturation(loads: list[EndpointLoad], queued: int, limit: float, wait: float, saturated: bool) -> None:
    result = cluster_saturation("c", loads, service_s=8.0, limit_s=limit, queued=queued)
    assert result.wait_s == pytest.approx(wait)
    assert result.saturated is saturated
    assert result.routable == len(loads)


def test_one_endpoint_without_waiters_is_the_load_models_queue_wait() -> None:
    for occupied in range(12):
        wait, _ = queue_wait([(float(occupied), 4.0)], 8.0, 0.99)
        result = cluster_saturation("c", [EndpointLoad(occupied, 4)], service_s=8.0, limit_s=1.0)
        assert result.wait_s == pytest.approx(wait)


def test_drain_is_the_median_and_no_endpoint_is_not_saturated() -> None:
    result = cluster_saturation("c", [EndpointLoad(9, 4, "full")], service_s=8.0, limit_s=1.0)
    assert result.drain_s == pytest.approx(slot_wait(6, 4, 8.0, 0.5))
    assert result.drain_s < result.wait_s
    assert result.measured
    empty = cluster_saturation("c", [], service_s=8.0, limit_s=1.0)
    assert (empty.wait_s, empty.saturated, empty.routable) == (math.inf, False, 0)
