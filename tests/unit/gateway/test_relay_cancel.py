"""How a relayed stream ends when its client leaves, and when its request task is cancelled from elsewhere.

The relay runs in the request's own task (``gateway/relay.py``); a watcher task cancels it when
``receive`` gives ``http.disconnect``. A client that leaves ends the stream as ``cancelled`` and the
call returns normally (the edge answers nothing more); a cancel from anywhere else (a shutdown)
still comes out as ``CancelledError``; either way the attempt is ended once and the task is left
with no pending cancel of the watcher's. A stream that had read its end when the client left is a
success; a ``receive`` that fails counts as the client leaving, and is logged.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.attempt import Attempt, Upstreamed
from gateway.endpoints.model import Endpoint, EndpointSpec
from gateway.exchange import Exchange
from gateway.observability.metrics import GatewayMetrics
from gateway.protocol.sse import StreamObserver
from gateway.relay import StreamRelay
from tests.unit.gateway.test_relay_memory import TwoReads, event


class Reads(TwoReads):
    """An upstream response: the given reads, then the end of the body."""

    async def next_chunk(self) -> bytes:
        return self._reads.pop(0) if self._reads else b""


def _relay(response: TwoReads | None = None, first_token_at: float = 0.0) -> tuple[StreamRelay, Endpoint, Exchange]:
    endpoint = Endpoint(EndpointSpec("e", "c", "http://e/v1", "m"))
    exchange = Exchange("r", "m", lambda: 0.0)
    first = event({"role": "assistant", "content": ""}) + event({"content": "a"})
    observer = StreamObserver(lambda: first_token_at)
    observer.feed(first)
    relay = StreamRelay(
        source=Upstreamed(Attempt(endpoint, None, GatewayMetrics()), response or TwoReads(event({"content": "b"})), first, None),
        observer=observer, exchange=exchange, idle_s=3600,
    )
    return relay, endpoint, exchange


@pytest.mark.parametrize("how", ["client_left", "cancelled_from_elsewhere"])
async def test_a_stream_ends_once_as_cancelled(how: str) -> None:
    relay, endpoint, exchange = _relay()
    sent: list[dict[str, Any]] = []
    second_read = asyncio.Event()
    leave = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if len(sent) == 3:  # headers, the first read, the second read: the stream now waits for more
            second_read.set()

    async def receive() -> dict[str, Any]:
        await leave.wait()
        return {"type": "http.disconnect"}

    task = asyncio.ensure_future(relay({"type": "http"}, receive, send))
    await asyncio.wait_for(second_read.wait(), 5)
    assert endpoint.in_flight == 1 and exchange.outcome is None
    if how == "client_left":
        leave.set()
        await asyncio.wait_for(task, 5)  # returns: nothing to answer
        assert task.cancelling() == 0  # the watcher's cancel was taken back
    else:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
    assert exchange.outcome == "cancelled" and endpoint.in_flight == 0
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body", "http.response.body"]


async def test_the_first_chunk_follows_the_headers_without_a_loop_turn() -> None:
    """Between the headers and the first body ``send`` no other callback of the loop runs."""
    relay, _, _ = _relay()
    order: list[str] = []

    async def send(message: dict[str, Any]) -> None:
        order.append(message["type"])
        if message["type"] == "http.response.start":
            asyncio.get_running_loop().call_soon(order.append, "loop turn")

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    task = asyncio.ensure_future(relay({"type": "http"}, receive, send))
    while len(order) < 3:
        await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert order[:2] == ["http.response.start", "http.response.body"], order  # the loop's turn comes after


async def test_a_client_leaving_as_the_stream_ends_is_a_success() -> None:
    """The watcher's cancel lands in the last ``send``: the endpoint's answer was complete."""
    relay, endpoint, exchange = _relay(Reads(event({"content": "b"}) + b"data: [DONE]\n\n"))
    leave = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and not message["more_body"]:
            leave.set()
            await asyncio.sleep(0.5)  # the client leaves while this one is being written

    async def receive() -> dict[str, Any]:
        await leave.wait()
        return {"type": "http.disconnect"}

    task = asyncio.ensure_future(relay({"type": "http"}, receive, send))
    await asyncio.wait_for(task, 5)
    assert task.cancelling() == 0
    assert exchange.outcome == "success" and endpoint.in_flight == 0


@pytest.mark.parametrize("first", ["client_left", "shutdown"])
async def test_a_client_leaving_during_a_shutdown_cancel_stays_cancelled(first: str) -> None:
    """Both cancels in one turn: the shutdown's is not swallowed by the watcher's."""
    relay, endpoint, exchange = _relay()
    waiting = asyncio.Event()
    leave = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            waiting.set()

    async def receive() -> dict[str, Any]:
        await leave.wait()
        return {"type": "http.disconnect"}

    task = asyncio.ensure_future(relay({"type": "http"}, receive, send))
    await asyncio.wait_for(waiting.wait(), 5)
    await asyncio.sleep(0)
    if first == "client_left":
        leave.set()
        task.cancel()
    else:
        task.cancel()
        leave.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert exchange.outcome == "cancelled" and endpoint.in_flight == 0


async def test_a_cancel_turned_into_another_error_leaves_no_pending_cancel() -> None:
    relay, endpoint, exchange = _relay()
    started = asyncio.Event()
    leave = asyncio.Event()

    class Wrapping(StreamRelay):  # a layer inside the relay that turns the cancel into an ordinary error
        __slots__ = ()

        async def _relay(self, send: Any) -> None:
            started.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                raise RuntimeError("wrapped cancel") from None

    relay.__class__ = Wrapping

    async def send(message: dict[str, Any]) -> None:
        pass

    async def receive() -> dict[str, Any]:
        await leave.wait()
        return {"type": "http.disconnect"}

    async def request() -> int:
        await relay({"type": "http"}, receive, send)
        await asyncio.sleep(0)  # a pending cancel would land here
        return asyncio.current_task().cancelling()  # type: ignore[union-attr]

    task = asyncio.ensure_future(request())
    await asyncio.wait_for(started.wait(), 5)
    leave.set()
    assert await asyncio.wait_for(task, 5) == 0
    assert exchange.outcome == "cancelled" and endpoint.in_flight == 0


async def test_a_failing_receive_ends_the_stream_and_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    relay, endpoint, exchange = _relay()
    waiting = asyncio.Event()
    broken = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            waiting.set()

    async def receive() -> dict[str, Any]:
        await broken.wait()
        raise OSError("connection reset")

    task = asyncio.ensure_future(relay({"type": "http"}, receive, send))
    await asyncio.wait_for(waiting.wait(), 5)
    with caplog.at_level("WARNING", logger="kvgate.relay"):
        broken.set()
        await asyncio.wait_for(task, 5)
    assert exchange.outcome == "cancelled" and endpoint.in_flight == 0 and task.cancelling() == 0
    assert any("connection reset" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize("end", ["client_left", "broken", "never_relayed"])
async def test_a_stream_that_did_not_succeed_keeps_its_ttft_once_the_first_token_was_sent(end: str) -> None:
    """The held preamble ("a", seen at 1.25 s) is the relay's first write: a stream cancelled or broken
    after it keeps that TTFT; a stream made but never relayed (the client left as it opened) has none."""
    response = TwoReads(event({"content": "b"})) if end == "client_left" else Reads(event({"content": "b"}))
    relay, endpoint, exchange = _relay(response, first_token_at=1.25)
    if end == "never_relayed":
        relay.settle()
        assert (exchange.outcome, exchange.first_token_at, endpoint.in_flight) == ("cancelled", None, 0)
        return
    sent: list[dict[str, Any]] = []
    leave = asyncio.Event()

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if len(sent) == 3:  # headers, the preamble, "b": the client leaves now
            leave.set()

    async def receive() -> dict[str, Any]:
        await leave.wait()
        if end == "broken":  # the stream ends without [DONE] before the client would leave
            await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    await asyncio.wait_for(relay({"type": "http"}, receive, send), 5)
    outcome = "cancelled" if end == "client_left" else "upstream_error"
    assert (exchange.outcome, exchange.first_token_at, endpoint.in_flight) == (outcome, 1.25, 0)
