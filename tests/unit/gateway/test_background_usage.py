"""BackgroundUsage: a background response's exchange is settled once, with its real usage."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from gateway.background_usage import MAX_INTERVAL_S, BackgroundUsage
from gateway.endpoints.model import Endpoint, EndpointSpec
from gateway.errors import UpstreamError
from gateway.exchange import SUCCESS, Exchange
from gateway.upstream.function import FunctionRequest, FunctionResponse, FunctionUpstream

USAGE = {"input_tokens": 9, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 7}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.waits: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def _response(status: str, usage: dict[str, Any] | None = None) -> bytes:
    return orjson.dumps({"id": "resp_1", "object": "response", "status": status, "usage": usage})


def _settler(answers: list[Any], clock: Clock, max_s: float = 3600.0) -> tuple[BackgroundUsage, FunctionUpstream]:
    def handler(request: FunctionRequest) -> FunctionResponse:
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, BaseException):
            raise answer
        return answer

    upstream = FunctionUpstream(handler)
    return BackgroundUsage(upstream, poll_s=1.0, max_s=max_s, clock=lambda: clock.now, sleep=clock.sleep), upstream


def _exchange() -> Exchange:
    return Exchange("req-1", "m", lambda: 0.0, api="responses")


ENDPOINT = Endpoint(EndpointSpec("e", "c", "http://e/v1", "m"))


async def _until(predicate: Any) -> None:
    for _ in range(10_000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("never")


@pytest.mark.asyncio
async def test_polls_with_doubling_intervals_until_terminal_then_settles_the_real_usage() -> None:
    clock = Clock()
    running = [FunctionResponse(200, _response("in_progress"))] * 7
    settler, upstream = _settler([*running, FunctionResponse(200, _response("completed", USAGE))], clock)
    exchange = _exchange()
    settler.watch("resp_1", exchange, ENDPOINT)
    await _until(lambda: exchange.outcome is not None)
    assert clock.waits == [1.0, 2.0, 4.0, 8.0, 16.0, MAX_INTERVAL_S, MAX_INTERVAL_S, MAX_INTERVAL_S]
    assert exchange.outcome == SUCCESS and exchange.tokens is not None
    assert (exchange.tokens.input, exchange.tokens.cached, exchange.tokens.output) == (9, 4, 7)
    assert upstream.requests[0].method == "GET" and upstream.requests[0].url == "http://e/v1/responses/resp_1"
    assert (settler.settled, settler.gave_up, "resp_1" in settler) == (1, 0, False)


@pytest.mark.asyncio
async def test_a_client_retrieve_settles_first_and_only_once() -> None:
    clock = Clock()
    settler, _ = _settler([FunctionResponse(200, _response("queued"))], clock)
    exchange = _exchange()
    settler.watch("resp_1", exchange, ENDPOINT)
    assert not settler.offer(orjson.loads(_response("in_progress")))  # not terminal: still pending
    assert settler.offer(orjson.loads(_response("completed", USAGE)))
    assert not settler.offer(orjson.loads(_response("completed", USAGE)))  # settled already
    assert exchange.tokens is not None and exchange.tokens.output == 7
    await asyncio.sleep(0)
    assert (settler.settled, settler.gave_up) == (1, 0)


@pytest.mark.parametrize("answers, why", [
    ([FunctionResponse(404, b'{"error": {"message": "gone"}}')], "the endpoint lost it"),
    ([UpstreamError("refused")], "failed polls in a row"),
    ([FunctionResponse(200, _response("in_progress"))], "the time bound"),
])
@pytest.mark.asyncio
async def test_giving_up_keeps_the_reservation_as_the_charge(answers: list[Any], why: str) -> None:
    clock = Clock()
    settler, upstream = _settler(answers, clock, max_s=100.0)
    exchange = _exchange()
    settler.watch("resp_1", exchange, ENDPOINT)
    await _until(lambda: exchange.outcome is not None)
    assert exchange.outcome == SUCCESS and exchange.tokens is None, why
    assert (settler.settled, settler.gave_up) == (0, 1)
    assert sum(clock.waits) <= 100.0 and len(upstream.requests) <= 8  # 1+2+4+8+16+30+30, then the 9 s left


@pytest.mark.asyncio
async def test_shutdown_cancels_the_pollers_and_settles_without_usage() -> None:
    clock = Clock()
    gate = asyncio.Event()

    async def never(seconds: float) -> None:
        await gate.wait()

    settler = BackgroundUsage(FunctionUpstream(lambda request: FunctionResponse(200, b"{}")), poll_s=1.0, max_s=60.0,
                              clock=lambda: clock.now, sleep=never)
    exchange = _exchange()
    settler.watch("resp_1", exchange, ENDPOINT)
    await asyncio.sleep(0)
    await settler.aclose()
    assert exchange.outcome == SUCCESS and exchange.tokens is None and settler.gave_up == 1
    late = _exchange()
    settler.watch("resp_2", late, ENDPOINT)  # after shutdown: finished at once
    assert late.outcome == SUCCESS and "resp_2" not in settler


@pytest.mark.asyncio
async def test_the_latency_ends_at_the_create_and_pending_responses_are_bounded() -> None:
    clock = Clock()
    upstream = FunctionUpstream(lambda request: FunctionResponse(200, _response("queued")))
    settler = BackgroundUsage(upstream, poll_s=1.0, max_s=3600.0, clock=lambda: clock.now, sleep=clock.sleep,
                              max_pending=1)
    exchange = Exchange("req-1", "m", lambda: clock.now, api="responses")
    clock.now = 2.0  # the create was answered 2 s after it started
    settler.watch("resp_1", exchange, ENDPOINT)
    clock.now = 500.0  # the background run ends much later
    assert settler.offer(orjson.loads(_response("completed", USAGE)))
    assert exchange.ended_at - exchange.started == 2.0, "the background run counted as the request's E2E"
    first, second = _exchange(), _exchange()
    settler.watch("resp_2", first, ENDPOINT)
    settler.watch("resp_3", second, ENDPOINT)  # past max_pending: finished at once, its reservation the charge
    assert ("resp_2" in settler, "resp_3" in settler) == (True, False)
    assert second.outcome == SUCCESS and second.tokens is None and settler.gave_up == 1
    await settler.aclose()
