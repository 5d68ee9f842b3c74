"""The director's attempt loop, table-driven, in process: ``Proxy.handle`` over a FunctionUpstream.

No sockets, no sleeps: the endpoints are functions (``gateway/upstream/function.py``), the clock
is injected (a Retry-After wait is recorded, not slept), and the client is an ASGI receive/send
pair. Each row says what endpoint ``a`` (ranked first) and ``b`` do, and asserts the outcome,
the attempts, which endpoints were tried, and the breaker and in-flight state afterwards
(in-flight back to 0: every attempt released exactly once).
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from gateway.app import create_app
from gateway.attempt import BufferedReply, Opener
from gateway.closeout import CloseOut
from gateway.config import build_settings
from gateway.endpoints.circuit import CircuitState
from gateway.errors import GatewayError, UpstreamError
from gateway.protocol.openai import Operation
from gateway.proxy import Proxy
from gateway.relay import ClientDisconnected, StreamRelay, race_disconnect
from gateway.upstream.function import FunctionRequest, FunctionResponse, FunctionUpstream

SSE = {"content-type": "text/event-stream"}


def event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def delta(content: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish}
    return event({"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]})


USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
ANSWER = orjson.dumps({"id": "x", "object": "chat.completion", "choices": [{"message": {"content": "ok"}}], "usage": USAGE})
STREAM = [delta("Hel"), delta("lo", "stop"), event({"id": "x", "choices": [], "usage": USAGE}), b"data: [DONE]\n\n"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Forever:
    """An async body that sends its reads, then waits until the test lets go (never a sleep)."""

    def __init__(self, *reads: bytes) -> None:
        self.reads = reads
        self.sent = asyncio.Event()
        self.hold = asyncio.Event()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for read in self.reads:
            yield read
        self.sent.set()
        await self.hold.wait()


@dataclass
class Row:
    name: str
    a: Callable[[FunctionRequest], Any]
    b: Callable[[FunctionRequest], Any] | None
    stream: bool
    outcome: str
    attempts: int
    tried: list[str]
    breaker_a: CircuitState = CircuitState.CLOSED
    failure_a: str | None = None  # the kvgate_upstream_failures_total reason counted against a
    cancel: bool = False  # the client leaves once the first content was sent (or while waiting)
    expect: dict[str, Any] = field(default_factory=dict)


def ok(request: FunctionRequest) -> FunctionResponse:
    if orjson.loads(request.body).get("stream"):
        return FunctionResponse(200, list(STREAM), SSE)
    return FunctionResponse(200, ANSWER, {"content-type": "application/json"})


def refused(request: FunctionRequest) -> FunctionResponse:
    raise UpstreamError("connection failed (Connection refused)")


def status(code: int, **headers: str) -> Callable[[FunctionRequest], FunctionResponse]:
    def answer(request: FunctionRequest) -> FunctionResponse:
        return FunctionResponse(code, b'{"error": {"message": "busy"}}', {"content-type": "application/json", **headers})
    return answer


def empty(request: FunctionRequest) -> FunctionResponse:
    return FunctionResponse(200, b"", {"content-type": "application/json"})


def first_event_error(request: FunctionRequest) -> FunctionResponse:
    return FunctionResponse(200, [event({"error": {"message": "engine overloaded"}})], SSE)


def breaks(request: FunctionRequest) -> FunctionResponse:
    return FunctionResponse(200, [delta("Hel"), UpstreamError("connection reset")], SSE)


HANG = Forever()  # the buffered cancel's endpoint: thinks until the client left

ROWS = [
    Row("connect-error", refused, ok, False, "success", 2, ["a", "b"], CircuitState.OPEN, "connect"),
    Row("503", status(503), ok, False, "success", 2, ["a", "b"], CircuitState.OPEN, "http_503"),
    Row("429-retry-after", status(429, **{"Retry-After": "2"}), ok, False, "success", 2, ["a", "b"],
        CircuitState.CLOSED, "http_429", expect={"waited": [2.0], "a_cooling": True}),
    Row("empty-body", empty, ok, False, "success", 2, ["a", "b"], CircuitState.OPEN, "empty_body"),
    Row("first-event-error", first_event_error, ok, True, "success", 2, ["a", "b"], CircuitState.OPEN, "stream_error",
        expect={"text": "Hello"}),
    Row("break-then-continuation", breaks, ok, True, "success", 1, ["a", "b"], CircuitState.OPEN, "broken_stream",
        expect={"continuations": 1, "continued": True}),
    Row("client-cancel-stream", lambda request: FunctionResponse(200, Forever(delta("Hel")), SSE), ok, True,
        "cancelled", 1, ["a"], cancel=True),
    Row("client-cancel-buffered", lambda request: FunctionResponse(200, HANG, {}), ok, False,
        "cancelled", 1, ["a"], cancel=True),
    Row("client-cancel-during-continuation", breaks, lambda request: FunctionResponse(200, Forever(), SSE), True,
        "cancelled", 1, ["a", "b"], CircuitState.OPEN, "broken_stream", cancel=True),
    Row("client-4xx-relayed", status(400), ok, False, "client_error", 1, ["a"]),
    Row("every-endpoint-fails", status(500), status(500), False, "upstream_error", 2, ["a", "b"], CircuitState.OPEN,
        "http_500"),
]


def settings() -> Any:
    return build_settings({
        "routing": {"policy": "round-robin"},  # a fresh app starts with a, then b
        "circuit": {"consecutive_failures": 1},
        "upstream": {"max_retry_after_s": 5.0},
        "clusters": {"c": {"endpoints": [
            {"name": "a", "url": "http://a.test/v1", "model": "served"},
            {"name": "b", "url": "http://b.test/v1", "model": "served"},
        ]}},
        "models": {"m": {"cluster": "c"}},
    })


async def serve(row: Row) -> dict[str, Any]:
    """One request through a fresh app's director; what the row asserts on."""
    clock = Clock()
    handlers = {"a": row.a, "b": row.b}
    upstream = FunctionUpstream(lambda request: handlers[request.url.split("//")[1].split(".")[0]](request))  # type: ignore[misc]
    waited: list[float] = []
    app = create_app(settings(), upstream=upstream, clock=clock, health_checks=False)
    async with app.router.lifespan_context(app):
        container = app.state.container
        proxy = director(container, app.state.routing, upstream, clock, waited)
        state = types.SimpleNamespace(request_id="r1", trace=None)
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": row.stream}
        left = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await left.wait()
            return {"type": "http.disconnect"}

        sent: list[bytes] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message.get("body", b""))
            if row.cancel and message.get("body"):
                left.set()

        async def leave_while_it_thinks() -> None:
            await HANG.sent.wait()
            left.set()

        leaving = asyncio.ensure_future(leave_while_it_thinks()) if row.cancel and not row.stream else None
        key = container.ops.gate.authenticate(None)
        try:
            reply, _ = await proxy.handle(
                Operation.CHAT, {"content-type": "application/json"}, orjson.dumps(body), state,
                lambda work: race_disconnect(work, receive), key,
            )
            if isinstance(reply, BufferedReply):
                sent.append(reply.body)
                reply.settle()
            else:
                assert isinstance(reply, StreamRelay)
                await reply({"type": "http"}, receive, send)
        except (ClientDisconnected, GatewayError):
            pass
        if leaving is not None:
            await leaving
        registry, metrics = container.registry, container.metrics.registry
        a, b = registry.find("a"), registry.find("b")
        return {
            "exchange": state.exchange,
            "tried": [request.url.split("//")[1].split(".")[0] for request in upstream.requests],
            "a": a, "b": b, "waited": waited, "body": b"".join(sent), "upstream": upstream,
            "in_flight": [metrics.get_sample_value("kvgate_endpoint_in_flight", {"endpoint": n}) or 0.0 for n in "ab"],
            "failures": {
                reason: metrics.get_sample_value("kvgate_upstream_failures_total", {"endpoint": "a", "reason": reason})
                for reason in ("connect", "http_503", "http_429", "http_500", "empty_body", "stream_error", "broken_stream")
            },
        }


def director(container: Any, routing: Any, upstream: FunctionUpstream, clock: Clock, waited: list[float]) -> Proxy:
    """The app's director, with its Retry-After wait recorded instead of slept."""
    ops = container.ops

    async def sleep(seconds: float) -> None:
        waited.append(seconds)

    return Proxy(
        selector=container.selector, gate=ops.gate, catalog=container.catalog, registry=container.registry,
        scheduler=routing.scheduler,
        opener=Opener(upstream, clock=clock, max_retry_after_s=5.0, max_cooldown_s=60.0, sleep=sleep, max_attempts=3),
        closeout=CloseOut(container.metrics, ops.pricing, ops.gate, ops.requests, clock=clock, selector=container.selector),
        metrics=container.metrics,
    )


@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
async def test_the_attempt_loop(row: Row) -> None:
    seen = await asyncio.wait_for(serve(row), 10)
    exchange, a, b = seen["exchange"], seen["a"], seen["b"]
    assert exchange.outcome == row.outcome
    assert exchange.attempts == row.attempts
    assert seen["tried"] == row.tried
    assert a.in_flight == 0 and b.in_flight == 0, "an attempt was not released exactly once"
    assert seen["in_flight"] == [0.0, 0.0]
    assert a.circuit is row.breaker_a
    assert a.breaker.available() is (row.breaker_a is CircuitState.CLOSED), "a probe was kept"
    assert b.circuit is CircuitState.CLOSED
    counted = {reason for reason, value in seen["failures"].items() if value}
    assert counted == ({row.failure_a} if row.failure_a else set())
    if row.cancel:
        assert all(response.closed for response in seen["upstream"].responses), "the engine was not told to stop"
    if "waited" in row.expect:
        assert seen["waited"] == row.expect["waited"]
    else:
        assert seen["waited"] == []
    if row.expect.get("a_cooling"):
        assert a.cooling_until > 0
    if "text" in row.expect:
        assert b"engine overloaded" not in seen["body"] and seen["body"].endswith(b"data: [DONE]\n\n")
    if row.expect.get("continued"):
        assert exchange.continuations == 1 and exchange.endpoint == "b"
        continued = orjson.loads(seen["upstream"].requests[1].body)
        assert continued["continue_final_message"] is True
        assert continued["messages"][-1] == {"role": "assistant", "content": "Hel"}
        assert b"kvgate_continuation" in seen["body"] and seen["body"].endswith(b"data: [DONE]\n\n")
