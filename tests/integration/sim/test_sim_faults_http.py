"""Fault injection over real HTTP: per-request header and worker-wide admin endpoint.

Faults with a duration run on the worker's ManualClock: the test checks the request is still
pending, advances virtual time, and sees it complete. Only waits for I/O to happen poll.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import httpx
import openai
import pytest
from sim_support import MODEL, RunningSim, instant_config

from backends.sim.latency import LatencyModel
from backends.sim.presets import get_preset
from tests.support.loopback import until

BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 5}
STREAM = {**BODY, "stream": True}


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Poll ``condition`` while loopback I/O happens (bounded; not a timing assertion)."""
    await until(condition, what, every_s=0.005)


def _events(raw: bytes) -> list[str]:
    return [e[len("data: "):] for e in raw.decode().split("\n\n") if e.startswith("data: ")]


def _fault(spec: str) -> dict[str, str]:
    return {"x-sim-fault": spec}


async def test_error_status_with_body(sim: RunningSim) -> None:
    with pytest.raises(openai.InternalServerError) as caught:
        await sim.client.chat.completions.create(
            model=MODEL, messages=BODY["messages"], extra_headers=_fault("error:status=503"))
    assert caught.value.status_code == 503 and caught.value.body["code"] == 503


async def test_rate_limit_with_retry_after(sim: RunningSim) -> None:
    reply = await sim.http.post("/v1/chat/completions", json=BODY,
                                headers=_fault("rate-limit:retry_after=3"))
    assert reply.status_code == 429 and reply.headers["retry-after"] == "3"
    assert reply.json()["error"]["type"] == "RateLimitError"


async def test_hang_before_headers_until_the_clock_moves(sim: RunningSim) -> None:
    task = asyncio.ensure_future(sim.http.post(
        "/v1/chat/completions", json=BODY, headers=_fault("hang-before-headers:seconds=30")))
    await _until(lambda: sim.clock.next_deadline is not None, "handler sleeping")
    assert not task.done()
    await sim.clock.advance(30)
    assert (await task).status_code == 500


async def test_client_leaving_mid_stream_aborts_the_engine_request(sim_factory) -> None:  # type: ignore[no-untyped-def]
    preset = get_preset("instant").with_overrides(latency=LatencyModel(0.01, 0.0, 0.0))
    sim: RunningSim = await sim_factory(instant_config(preset=preset))
    body = {**STREAM, "max_tokens": 1000}

    async def tick() -> None:  # virtual time runs while the client reads
        while True:
            await sim.clock.advance(0.01)
            await asyncio.sleep(0.002)

    ticker = asyncio.ensure_future(tick())
    try:
        async with sim.http.stream("POST", "/v1/chat/completions", json=body) as response:
            assert (await anext(response.aiter_lines())).startswith("data: ")
    finally:
        ticker.cancel()
    await _until(lambda: sim.worker.in_flight == 0, "handler cancelled")
    assert sim.worker.metrics.success == {"abort": 1}
    assert sim.worker.engine.cache.used_blocks == 0
    assert sim.worker.engine.gauges().running == 0


async def test_hang_after_n_tokens_then_resume(sim: RunningSim) -> None:
    chunks: list[bytes] = []

    async def read() -> None:
        async with sim.http.stream("POST", "/v1/chat/completions", json=STREAM,
                                   headers=_fault("hang-after:tokens=2,seconds=10")) as response:
            async for chunk in response.aiter_bytes():
                chunks.append(chunk)

    task = asyncio.ensure_future(read())
    await _until(lambda: len(_events(b"".join(chunks))) == 3, "role + 2 tokens")
    assert sim.clock.next_deadline is not None and not task.done()
    await sim.clock.advance(10)
    await task
    events = _events(b"".join(chunks))
    assert len(events) == 1 + 5 + 1 and events[-1] == "[DONE]"


async def test_drop_after_n_tokens_cuts_the_connection(sim: RunningSim) -> None:
    received = b""
    with pytest.raises(httpx.HTTPError):
        async with sim.http.stream("POST", "/v1/chat/completions", json=STREAM,
                                   headers=_fault("drop-after:tokens=2")) as response:
            assert response.status_code == 200
            async for chunk in response.aiter_bytes():
                received += chunk
    assert len(_events(received)) == 3 and b"[DONE]" not in received


async def test_slow_first_token(sim: RunningSim) -> None:
    task = asyncio.ensure_future(sim.client.chat.completions.create(
        model=MODEL, messages=BODY["messages"], max_tokens=2,
        extra_headers=_fault("slow-first-token:seconds=5")))
    await _until(lambda: sim.clock.next_deadline is not None, "first token held back")
    assert not task.done()
    await sim.clock.advance(5)
    assert (await task).usage.completion_tokens == 2


async def test_error_event_inside_a_200_stream(sim: RunningSim) -> None:
    reply = await sim.http.post("/v1/chat/completions", json=STREAM,
                                headers=_fault("stream-error:tokens=2"))
    events = _events(reply.content)
    assert reply.status_code == 200 and events[-1] == "[DONE]"
    assert json.loads(events[-2])["error"]["code"] == 500 and len(events) == 1 + 2 + 2
    with pytest.raises(openai.APIError):
        stream = await sim.client.chat.completions.create(
            model=MODEL, messages=BODY["messages"], stream=True,
            extra_headers=_fault("stream-error:tokens=1"))
        async for _ in stream:
            pass


async def test_malformed_event_then_the_stream_goes_on(sim: RunningSim) -> None:
    reply = await sim.http.post("/v1/chat/completions", json=STREAM,
                                headers=_fault("malformed-sse:tokens=1"))
    events = _events(reply.content)
    with pytest.raises(json.JSONDecodeError):
        json.loads(events[2])
    assert events[-1] == "[DONE]" and len(events) == 1 + 5 + 1 + 1


async def test_bad_fault_header_is_a_400(sim: RunningSim) -> None:
    reply = await sim.http.post("/v1/chat/completions", json=BODY, headers=_fault("explode"))
    assert reply.status_code == 400 and "unknown fault kind" in reply.json()["error"]["message"]


async def test_worker_wide_faults_via_admin(sim: RunningSim) -> None:
    added = await sim.http.post("/admin/faults", json={"spec": "error:status=502,count=1"})
    assert added.json() == {"faults": ["error:status=502,count=1"]}
    first = await sim.http.post("/v1/chat/completions", json=BODY)
    second = await sim.http.post("/v1/chat/completions", json=BODY)
    assert (first.status_code, second.status_code) == (502, 200)
    await sim.http.post("/admin/faults", json={"spec": "unhealthy"})
    assert (await sim.http.get("/health")).status_code == 503
    cleared = await sim.http.delete("/admin/faults")
    assert cleared.json() == {"faults": []} and (await sim.http.get("/health")).status_code == 200
    assert (await sim.http.post("/admin/faults", json={"spec": "nope"})).status_code == 400


async def test_stuck_worker_still_reports_healthy(sim: RunningSim) -> None:
    await sim.http.post("/admin/faults", json={"spec": "stuck"})
    task = asyncio.ensure_future(sim.http.post("/v1/chat/completions", json=BODY))
    await _until(lambda: sim.worker.engine.gauges().waiting == 1, "request queued")
    assert (await sim.http.get("/health")).status_code == 200
    metrics = (await sim.http.get("/metrics")).text
    assert 'vllm:num_requests_waiting{engine="0",model_name="sim-model"} 1.0' in metrics
    assert not task.done()
    await sim.http.delete("/admin/faults")
    assert (await task).status_code == 200


async def test_stream_faults_on_non_streamed_requests(sim: RunningSim) -> None:
    failed = await sim.http.post("/v1/chat/completions", json=BODY,
                                 headers=_fault("stream-error:tokens=2,status=502"))
    assert failed.status_code == 502 and failed.json()["error"]["code"] == 502
    broken = await sim.http.post("/v1/chat/completions", json=BODY, headers=_fault("malformed-sse"))
    assert broken.status_code == 200
    with pytest.raises(json.JSONDecodeError):
        broken.json()
    with pytest.raises(httpx.HTTPError):
        await sim.http.post("/v1/chat/completions", json=BODY, headers=_fault("drop-after:tokens=2"))
    # a threshold beyond the output never fires
    fine = await sim.http.post("/v1/chat/completions", json=BODY,
                               headers=_fault("drop-after:tokens=50"))
    assert fine.status_code == 200 and fine.json()["usage"]["completion_tokens"] == 5
