"""How a relayed stream ends when its client leaves, and when its request task is cancelled from elsewhere.

The relay runs in the request's own task (``gateway/relay.py``); a watcher task cancels it when
``receive`` gives ``http.disconnect``. A client that leaves ends the stream as ``cancelled`` and the
call returns normally (the edge answers nothing more); a cancel from anywhere else (a shutdown)
still comes out as ``CancelledError``; either way the attempt is ended once and the task is left
with no pending cancel of the watcher's.
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


def _relay() -> tuple[StreamRelay, Endpoint, Exchange]:
    endpoint = Endpoint(EndpointSpec("e", "c", "http://e/v1", "m"))
    exchange = Exchange("r", "m", lambda: 0.0)
    first = event({"role": "assistant", "content": ""}) + event({"content": "a"})
    observer = StreamObserver(lambda: 0.0)
    observer.feed(first)
    relay = StreamRelay(
        source=Upstreamed(Attempt(endpoint, None, GatewayMetrics()), TwoReads(event({"content": "b"})), first, None),
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
