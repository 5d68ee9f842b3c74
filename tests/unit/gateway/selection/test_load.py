"""The load model: queue wait and load from occupancy, EWMAs from finished requests."""

from __future__ import annotations

import math

import pytest

from gateway.endpoints.metrics_parse import EngineStats
from gateway.endpoints.model import Endpoint, EndpointSpec
from gateway.endpoints.stats import Scrape
from gateway.selection.load import (
    ALPHA,
    ERROR_ALPHA,
    ClusterProfile,
    LoadTracker,
    occupancy,
    order_quantile,
    queue_wait,
    slot_wait,
)

PROFILE = ClusterProfile("c", "fast", slots_per_endpoint=4, ttft_prior_s=0.5, service_prior_s=8.0,
                         expected_output_tokens=300.0)


def endpoint(name: str, in_flight: int = 0, weight: float = 1.0) -> Endpoint:
    e = Endpoint(EndpointSpec(name, "c", "http://127.0.0.1:1/v1", "m", weight=weight))
    e.in_flight = in_flight
    return e


@pytest.mark.parametrize(
    ("k", "n", "quantile", "expected"),
    [
        (1, 1, 0.99, 0.99),  # one uniform: its own quantile
        (1, 4, 0.99, 1 - 0.01 ** 0.25),  # the first of n frees by x with chance 1 - (1 - x)^n
        (4, 4, 0.5, 0.5 ** 0.25),  # the last of n: x^n
        (1, 16, 0.9, 1 - 0.1 ** (1 / 16)),
    ],
)
def test_order_quantile(k: int, n: int, quantile: float, expected: float) -> None:
    assert order_quantile(k, n, quantile) == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize(
    ("ahead", "slots", "expected"),
    [(0, 4, 0.0), (-3, 4, 0.0), (1, 4, 8.0 * (1 - 0.01 ** 0.25)), (5, 4, 8.0 * (1 + 1 - 0.01 ** 0.25)),
     (4, 4, 8.0 * 0.01 ** 0.0 * 0.99 ** 0.25)],
)
def test_slot_wait(ahead: int, slots: int, expected: float) -> None:
    assert slot_wait(ahead, slots, 8.0, 0.99) == pytest.approx(expected, abs=1e-4)


P99_FIRST = 8.0 * (1 - 0.01 ** 0.25)  # first of 4 slots to free, p99, 8 s service


@pytest.mark.parametrize(
    ("pairs", "wait", "load"),
    [
        ([(0, 4)], 0.0, 0.25),
        ([(3, 4)], 0.0, 1.0),
        ([(4, 4)], P99_FIRST, 1.25),
        ([(7, 4)], 8.0 * 0.99 ** 0.25, 2.0),  # 4 ahead: the last of the 4 running must finish
        ([(8, 4)], 8.0 + P99_FIRST, 2.25),  # a whole round, then the first of the next
        ([(8, 4), (4, 4)], P99_FIRST, 1.25),  # the least busy endpoint decides
        ([], math.inf, math.inf),
    ],
)
def test_queue_wait(pairs: list[tuple[float, float]], wait: float, load: float) -> None:
    assert queue_wait(pairs, 8.0, 0.99) == (pytest.approx(wait, abs=1e-4), pytest.approx(load))


def test_a_lower_quantile_predicts_a_shorter_wait() -> None:
    assert queue_wait([(4, 4)], 8.0, 0.5)[0] < queue_wait([(4, 4)], 8.0, 0.99)[0]


@pytest.mark.parametrize(
    ("in_flight", "running", "waiting", "expected"),
    [(2, None, None, 2.0), (2, 5.0, 3.0, 8.0), (9, 5.0, 3.0, 9.0), (1, 5.0, None, 5.0)],
)
def test_occupancy_takes_the_larger_of_local_and_engine_counts(in_flight: int, running: float | None,
                                                               waiting: float | None, expected: float) -> None:
    scrape = None if running is None else Scrape(EngineStats("vllm", waiting=waiting, running=running), at=0.0)
    assert occupancy(endpoint("e", in_flight), scrape) == expected


def test_view_skips_unroutable_endpoints_and_uses_fresh_scrapes() -> None:
    tracker = LoadTracker()
    busy, drained = endpoint("busy", 2), endpoint("drained", 0)
    drained.draining = True
    scrapes = {"busy": Scrape(EngineStats("vllm", running=4.0, waiting=2.0), at=0.0)}
    view = tracker.view(PROFILE, [busy, drained], scrapes.get)
    assert view.routable == 1
    assert view.load == pytest.approx(7 / 4)
    assert view.wait_s == pytest.approx(slot_wait(3, 4, 8.0, 0.99))
    assert view.predicted_ttft_s == pytest.approx(0.5 + view.wait_s)


def test_no_routable_endpoint_means_infinite_wait() -> None:
    view = LoadTracker().view(PROFILE, [])
    assert view.routable == 0 and view.predicted_ttft_s == math.inf


def test_observe_learns_base_ttft_from_requests_that_did_not_queue() -> None:
    tracker = LoadTracker()
    tracker.observe(PROFILE, ok=True, wait_s=2.0, ttft_s=3.0, e2e_s=12.0, output_tokens=100)
    view = tracker.view(PROFILE, [endpoint("e")])
    assert view.base_ttft_s == 0.5  # it queued: its TTFT says nothing about the base
    assert view.output_tokens == pytest.approx(300 + ALPHA * (100 - 300))
    tracker.observe(PROFILE, ok=True, wait_s=0.0, ttft_s=1.0, e2e_s=4.0, output_tokens=None)
    assert tracker.view(PROFILE, [endpoint("e")]).base_ttft_s == pytest.approx(0.5 + ALPHA * 0.5)


@pytest.mark.parametrize(
    ("wait", "ttft", "e2e", "service"),
    [
        (0.0, 0.5, 16.5, 16.5),  # streamed: slot time = e2e - ttft + base (0.5)
        (5.0, 5.5, 21.5, 16.5),  # queued 5 s: the queue is not service
        (0.0, None, 16.0, 16.0),  # not streamed, not queued: e2e
        (5.0, None, 21.0, 8.0),  # not streamed and queued: unknown, prior kept
    ],
)
def test_service_time_is_the_slot_holding_time(wait: float, ttft: float | None, e2e: float, service: float) -> None:
    tracker = LoadTracker()
    for _ in range(60):
        tracker.observe(PROFILE, ok=True, wait_s=wait, ttft_s=ttft, e2e_s=e2e, output_tokens=None)
    four_busy = tracker.view(PROFILE, [endpoint("e", 4)])
    assert four_busy.wait_s == pytest.approx(slot_wait(1, 4, service, 0.99), rel=1e-3)


def test_errors_raise_the_error_rate_and_teach_nothing_else() -> None:
    tracker = LoadTracker()
    tracker.observe(PROFILE, ok=False, wait_s=0.0, ttft_s=9.0, e2e_s=9.0, output_tokens=9)
    view = tracker.view(PROFILE, [endpoint("e")])
    assert view.error_rate == pytest.approx(ERROR_ALPHA)
    assert (view.base_ttft_s, view.output_tokens) == (0.5, 300.0)
    tracker.forget("c")
    assert tracker.view(PROFILE, [endpoint("e")]).error_rate == 0.0
