"""The engine loop in virtual time: TTFT and ITL follow the latency model, exactly."""

from __future__ import annotations

import asyncio

import pytest

from backends.sim.clock import ManualClock, settle
from backends.sim.engine import PromptTooLong, SimEngine
from backends.sim.latency import LatencyModel
from backends.sim.prometheus import WorkerMetrics
from backends.sim.output import OutputLength, OutputPolicy
from backends.sim.presets import get_preset

LATENCY = LatencyModel(fixed_s=0.010, prefill_token_s=0.001, decode_seq_s=0.002, admission_s=0.0)


def _engine(clock: ManualClock, **overrides: object) -> SimEngine:
    settings: dict[str, object] = {"latency": LATENCY, "block_size": 16, **overrides}
    preset = get_preset("gpu-8b").with_overrides(**settings)
    metrics = WorkerMetrics(max_model_len=preset.max_model_len)
    engine = SimEngine(preset, clock, OutputPolicy(OutputLength.parse("max")), metrics)
    engine.start()
    return engine


async def test_cold_then_warm_ttft_and_itl_follow_the_latency_model() -> None:
    clock = ManualClock()
    engine = _engine(clock)
    prompt = list(range(100))
    cold = await engine.submit(prompt, max_tokens=3)
    await clock.advance(1.0)
    assert cold.done and cold.finish_reason == "length"
    assert cold.first_token_at == pytest.approx(0.010 + 0.100)
    assert cold.last_token_at == pytest.approx(0.110 + 2 * 0.012)
    start = clock.now()
    warm = await engine.submit(prompt + [5, 6], max_tokens=1)
    await clock.advance(1.0)
    # 96 of 102 tokens hit (6 whole blocks of 16): only 6 are prefilled
    assert warm.cached_tokens == 96
    assert warm.first_token_at - start == pytest.approx(0.010 + 0.006)
    gauges = engine.gauges()
    assert (gauges.prefix_queries, gauges.prefix_hits) == (202, 96)
    assert engine.metrics.ttft.count == 2 and engine.metrics.itl.count == 2
    assert engine.metrics.success == {"length": 2}
    await engine.stop()


async def test_batched_decode_shares_the_step() -> None:
    clock = ManualClock()
    engine = _engine(clock)
    a = await engine.submit([1] * 10, max_tokens=4)
    b = await engine.submit([2] * 10, max_tokens=4)
    await clock.advance(5.0)
    # one prefill step of 20 tokens, then decode steps of 2 sequences each
    assert a.first_token_at == b.first_token_at == pytest.approx(0.030)
    assert a.last_token_at == pytest.approx(0.030 + 3 * (0.010 + 2 * 0.002))
    await engine.stop()


async def test_stuck_engine_makes_no_progress_until_released() -> None:
    clock = ManualClock()
    engine = _engine(clock)
    engine.stuck = True
    handle = await engine.submit([1, 2, 3], max_tokens=2)
    await clock.advance(10.0)
    assert handle.emitted == 0 and engine.gauges().waiting == 1
    engine.stuck = False
    await clock.advance(1.0)
    assert handle.done and handle.emitted == 2
    await engine.stop()


async def test_waiters_wake_on_tokens_and_abort_releases_blocks() -> None:
    clock = ManualClock()
    engine = _engine(clock)
    handle = await engine.submit(list(range(40)), max_tokens=100)
    waiter = asyncio.ensure_future(handle.wait(0))
    await clock.advance(0.051)
    assert waiter.done() and waiter.result() == 1
    assert engine.cache.usage > 0
    engine.abort(handle)
    await settle()
    assert handle.finish_reason == "abort" and engine.cache.usage == 0
    assert engine.metrics.success == {"abort": 1}
    await engine.stop()


async def test_admission_cost_is_added_before_the_engine_sees_the_request() -> None:
    clock = ManualClock()
    engine = _engine(clock, latency=LatencyModel(0.01, 0.0, 0.0, admission_s=0.5))
    submitted = asyncio.ensure_future(engine.submit([1, 2], max_tokens=1))
    await clock.advance(1.0)
    handle = submitted.result()
    assert handle.first_token_at == pytest.approx(0.51)
    await engine.stop()


@pytest.mark.parametrize(("prompt", "max_tokens"), [(2048, None), (2000, 100)])
async def test_too_long_requests_are_refused(prompt: int, max_tokens: int | None) -> None:
    clock = ManualClock()
    engine = _engine(clock, max_model_len=2048)
    with pytest.raises(PromptTooLong):
        await engine.submit([1] * prompt, max_tokens=max_tokens)
    await engine.stop()
