"""Both upstream clients (native and aiohttp) over real loopback TCP, at the byte level a scripted fake can't reach.

A raw asyncio server writes the HTTP/1.1 response by hand, so the test decides exactly which
bytes arrive before the connection breaks.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from gateway.errors import UpstreamError
from gateway.config import UpstreamSettings
from gateway.upstream.client import AiohttpUpstream, Upstream
from gateway.upstream.native import NativeUpstream

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
FIRST = b'data: {"n": 1}\n\n'
SECOND = b'data: {"n": 2}\n\n'


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


class BreakingServer:
    """Answers one request with ``FIRST``; on ``release`` sends ``SECOND`` and drops the connection."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.closed = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        await reader.readexactly(length)
        writer.write(HEAD + _chunk(FIRST))
        await writer.drain()
        await self.release.wait()
        writer.write(_chunk(SECOND))  # no terminating 0-chunk: the body is cut short
        await writer.drain()
        writer.close()
        await writer.wait_closed()
        self.closed.set()

    @property
    def url(self) -> str:
        assert self.server is not None
        port = self.server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/v1/chat/completions"


@pytest_asyncio.fixture
async def breaking() -> AsyncIterator[BreakingServer]:
    fake = BreakingServer()
    fake.server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    async with fake.server:
        yield fake


@pytest_asyncio.fixture(params=["native", "aiohttp"])
async def upstream(request: pytest.FixtureRequest) -> AsyncIterator[Upstream]:
    client: Upstream = NativeUpstream(UpstreamSettings()) if request.param == "native" else AiohttpUpstream(UpstreamSettings())
    yield client
    await client.aclose()


async def test_bytes_received_before_a_break_are_relayed_before_the_error(
    breaking: BreakingServer, upstream: Upstream
) -> None:
    extra = {"connect_timeout_s": 5.0} if "connect_timeout_s" in inspect.signature(upstream.post).parameters else {}
    response = await upstream.post(breaking.url, b"{}", {"Content-Type": "application/json"}, **extra)
    assert response.status == 200
    assert await response.next_chunk() == FIRST
    breaking.release.set()
    await asyncio.wait_for(breaking.closed.wait(), 5)
    await asyncio.sleep(0.2)  # let the client read SECOND and then the end of the connection
    # SECOND reached the gateway before the break; losing it would drop tokens the engine sent.
    assert await response.next_chunk() == SECOND
    with pytest.raises(UpstreamError, match="closed before the response body was complete"):
        await response.next_chunk()
