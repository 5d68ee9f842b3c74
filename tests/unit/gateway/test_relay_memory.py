"""What a stream relayed event by event holds while its client does not read (issue 17, Low).

A fast endpoint's read holds thousands of events; while ``send`` waits for a slow client the
relay must not keep them parsed (~1.5 KB a dict): it works through a read 64 KiB at a time and
keeps parsed only what it needs. Measured with tracemalloc around one blocked ``send``.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from typing import Any

import orjson

from gateway.attempt import Attempt, Upstreamed
from gateway.endpoints.model import Endpoint, EndpointSpec
from gateway.exchange import Exchange
from gateway.observability.metrics import GatewayMetrics
from gateway.protocol.sse import StreamObserver
from gateway.relay import StreamRelay


def event(delta: dict[str, Any]) -> bytes:
    chunk = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": None, "logprobs": None}]}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


class TwoReads:
    """An upstream response: the given reads, then silence."""

    status = 200
    headers = {"content-type": "text/event-stream"}

    def __init__(self, *reads: bytes) -> None:
        self._reads = list(reads)

    async def next_chunk(self) -> bytes:
        if self._reads:
            return self._reads.pop(0)
        await asyncio.sleep(3600)
        return b""

    async def read(self) -> bytes:
        raise AssertionError("not used")

    def close(self) -> None:
        pass

    def release(self) -> None:
        pass


async def held_while_the_client_waits(big: bytes) -> int:
    first = event({"role": "assistant", "content": ""}) + event({"content": "a"})
    observer = StreamObserver(lambda: 0.0, collect=True)
    observer.feed(first)
    endpoint = Endpoint(EndpointSpec("e", "c", "http://e/v1", "m"))

    class NoContinuation:
        async def next(self, seen: StreamObserver, tried: set[str]) -> None:
            return None

    relay = StreamRelay(
        source=Upstreamed(Attempt(endpoint, None, GatewayMetrics()), TwoReads(big), first, None),
        observer=StreamObserver(lambda: 0.0, collect=True),
        exchange=Exchange("r", "m", lambda: 0.0),
        idle_s=3600,
        continuation=NoContinuation(),  # type: ignore[arg-type]
    )
    blocked = asyncio.Event()
    sends = 0

    async def send(message: dict[str, Any]) -> None:
        nonlocal sends
        sends += 1
        if sends > 1 and message.get("body"):  # the big read: the client stops reading
            blocked.set()
            await asyncio.sleep(3600)

    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        task = asyncio.ensure_future(relay._relay(send))
        await asyncio.wait_for(blocked.wait(), 10)
        held = tracemalloc.get_traced_memory()[0] - baseline
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    finally:
        tracemalloc.stop()
    return held


def test_a_blocked_stream_holds_no_parsed_read() -> None:
    big = event({"content": " token"}) * 8000  # ~1 MiB in one read
    held = asyncio.run(held_while_the_client_waits(big))
    assert held < 1024 * 1024, f"{held / 1e6:.1f} MB held for a {len(big) / 1e6:.1f} MB read"
