"""The loop-lag monitor, driven by an injected clock and sleep (no time passes)."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from gateway.observability.loop_lag import LagSnapshot, LoopLagMonitor
from gateway.observability.metrics import GatewayMetrics


class FakeTime:
    """A clock that a sleep advances by what was asked plus the next scripted delay."""

    def __init__(self, delays: list[float]) -> None:
        self.now = 100.0
        self.delays = list(delays)

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.now += seconds + self.delays.pop(0)


def drive(delays: list[float], **kwargs: object) -> LoopLagMonitor:
    fake = FakeTime(delays)
    monitor = LoopLagMonitor(0.005, clock=fake.clock, sleep=fake.sleep, **kwargs)  # type: ignore[arg-type]
    asyncio.run(monitor.run(ticks=len(delays)))
    return monitor


def test_lag_is_how_late_each_wakeup_was() -> None:
    monitor = drive([0.0, 0.002, 0.0, 0.030, 0.001])
    figures = monitor.snapshot()
    assert figures.samples == 5
    assert figures.max_s == pytest.approx(0.030)
    assert figures.max_since_start_s == pytest.approx(0.030)


@pytest.mark.parametrize(("count", "rank"), [(1, 0), (100, 98), (101, 99), (1000, 989)])
def test_p99_is_the_nearest_rank(count: int, rank: int) -> None:
    monitor = LoopLagMonitor()
    for index in range(count):
        monitor.observe(index / 1000)
    assert monitor.snapshot().p99_s == pytest.approx(rank / 1000)


def test_the_window_forgets_old_ticks_but_not_the_worst_since_start() -> None:
    monitor = LoopLagMonitor(window=3)
    for lag in (0.5, 0.001, 0.002, 0.003):
        monitor.observe(lag)
    assert monitor.snapshot() == LagSnapshot(3, 0.003, 0.003, 0.5)


def test_an_early_wakeup_reads_as_no_lag_and_an_empty_monitor_as_zero() -> None:
    assert LoopLagMonitor().snapshot() == LagSnapshot(0, 0.0, 0.0, 0.0)
    monitor = LoopLagMonitor()
    monitor.observe(-0.001)
    assert monitor.snapshot().max_s == 0.0


def test_instruments_get_every_tick_and_the_gauges_every_publish() -> None:
    metrics = GatewayMetrics(CollectorRegistry())
    monitor = drive([0.001] * 9 + [0.040], histogram=metrics.loop_lag, max_gauge=metrics.loop_lag_max,
                    p99_gauge=metrics.loop_lag_p99, publish_every=5)
    read = metrics.registry.get_sample_value
    assert read("kvgate_event_loop_lag_seconds_count") == 10
    assert read("kvgate_event_loop_lag_seconds_bucket", {"le": "0.002"}) == 9
    assert read("kvgate_event_loop_lag_max_seconds") == pytest.approx(0.040)
    assert read("kvgate_event_loop_lag_p99_seconds") == pytest.approx(0.040)
    assert monitor.snapshot().samples == 10


def test_start_and_stop_on_a_real_loop() -> None:
    async def run() -> LagSnapshot:
        monitor = LoopLagMonitor(0.001)
        task = monitor.start()
        assert monitor.start() is task
        await asyncio.sleep(0.02)
        await monitor.stop()
        assert task.done()
        return monitor.snapshot()

    assert asyncio.run(run()).samples >= 1


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        LoopLagMonitor(0)
    with pytest.raises(ValueError):
        LoopLagMonitor(window=0)
