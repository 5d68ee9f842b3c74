"""The keep-alive race (issue 16, item 8): a reused connection closed by the endpoint before any byte.

An endpoint may close an idle keep-alive connection just as kvgate sends the next request on it
(its idle timeout fired, it restarted its workers). The request never reached the application,
so the native client retries it once on a fresh connection, and the attempt is the endpoint's
success: no failure counted, no failover to the next cluster (a paid provider).

Raw ``asyncio`` servers on loopback decide exactly when a connection closes (FIN or RST); the
gateway-level case uses the scripted upstream (``tests/support/scripted.py``) and the official
``openai`` SDK.
"""

from __future__ import annotations

import asyncio
import itertools
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import httpx
import openai
import pytest
import pytest_asyncio

from gateway.errors import UpstreamError
from gateway.config import UpstreamSettings
from gateway.upstream.native import NativeUpstream
from tests.support.gateway import RunningGateway, metric
from tests.support.scripted import ScriptedUpstream

WAIT_S = 5.0
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


async def _read_request(reader: asyncio.StreamReader) -> bool:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return False
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
    await reader.readexactly(length)
    return True


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


class Endpoint:
    """Answers per connection: ``plan[i]`` is the list of actions for the i-th request on a connection.

    Actions: ``"ok"`` (a whole answer, keep-alive), ``"close"`` (FIN, no byte), ``"reset"`` (RST,
    no byte), ``"partial"`` (a status line, then FIN); a plan's last action repeats. ``plans``
    holds one plan per accepted connection, in order; the last one repeats. ``requests`` counts
    requests read.
    """

    def __init__(self, *plans: list[str]) -> None:
        self.plans = list(plans)
        self.accepted = 0
        self.requests = 0
        self.server: asyncio.Server | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        plan = self.plans[min(self.accepted, len(self.plans) - 1)]
        self.accepted += 1
        try:
            for index in itertools.count():
                action = plan[min(index, len(plan) - 1)]
                if not await _read_request(reader):
                    return
                self.requests += 1
                if action == "ok":
                    writer.write(OK)
                    await writer.drain()
                elif action == "reset":
                    _reset(writer)
                    return
                elif action == "partial":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Le")
                    await writer.drain()
                    writer.close()
                    return
                else:
                    writer.close()
                    return
        finally:
            if not writer.is_closing():
                writer.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/v1/chat/completions"


Start = Callable[..., Awaitable[tuple[Endpoint, NativeUpstream]]]


@pytest_asyncio.fixture
async def start() -> AsyncIterator[Start]:
    made: list[tuple[Endpoint, NativeUpstream]] = []

    async def run(*plans: list[str]) -> tuple[Endpoint, NativeUpstream]:
        endpoint = Endpoint(*plans)
        endpoint.server = await asyncio.start_server(endpoint._handle, "127.0.0.1", 0)
        pool = NativeUpstream(UpstreamSettings())
        made.append((endpoint, pool))
        return endpoint, pool

    yield run
    for endpoint, pool in made:
        await pool.aclose()
        assert endpoint.server is not None
        endpoint.server.close()


async def _exchange(pool: NativeUpstream, url: str) -> bytes:
    response = await asyncio.wait_for(pool.post(url, b"{}", {}, WAIT_S), WAIT_S)
    return await asyncio.wait_for(response.read(), WAIT_S)


@pytest.mark.parametrize("how", ["close", "reset"])
async def test_reused_connection_closed_before_any_byte_is_retried_on_a_fresh_one(start: Start, how: str) -> None:
    endpoint, pool = await start(["ok", how], ["ok"])
    assert await _exchange(pool, endpoint.url) == b"ok"
    assert await _exchange(pool, endpoint.url) == b"ok"  # the race: answered on a second connection
    assert (endpoint.accepted, endpoint.requests) == (2, 3)
    assert await _exchange(pool, endpoint.url) == b"ok"  # and that one is kept for the next request
    assert endpoint.accepted == 2


async def test_a_fresh_connection_closed_before_any_byte_is_not_retried(start: Start) -> None:
    endpoint, pool = await start(["close"], ["ok"])
    with pytest.raises(UpstreamError, match="server disconnected"):
        await _exchange(pool, endpoint.url)
    assert (endpoint.accepted, endpoint.requests) == (1, 1)


async def test_a_reused_connection_that_began_an_answer_is_not_retried(start: Start) -> None:
    endpoint, pool = await start(["ok", "partial"], ["ok"])
    assert await _exchange(pool, endpoint.url) == b"ok"
    with pytest.raises(UpstreamError):
        await _exchange(pool, endpoint.url)
    assert (endpoint.accepted, endpoint.requests) == (1, 2)


async def test_the_retry_happens_once(start: Start) -> None:
    endpoint, pool = await start(["ok", "close"], ["close"], ["ok"])
    assert await _exchange(pool, endpoint.url) == b"ok"
    with pytest.raises(UpstreamError, match="server disconnected"):
        await _exchange(pool, endpoint.url)
    assert (endpoint.accepted, endpoint.requests) == (2, 3)


# -- through the gateway -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def upstreams() -> Iterator[dict[str, ScriptedUpstream]]:
    servers = {name: ScriptedUpstream(name).start() for name in ("A", "C")}
    yield servers
    for server in servers.values():
        server.stop()


def test_the_race_does_not_fail_over_to_the_provider(upstreams: dict[str, ScriptedUpstream]) -> None:
    gateway = RunningGateway(
        {
            "clusters": {
                "local": {"endpoints": [{"name": "A", "url": upstreams["A"].base_url, "model": "m"}]},
                "provider": {"endpoints": [{"name": "C", "url": upstreams["C"].base_url, "model": "m"}]},
            },
            "routes": {"local-then-provider": {"clusters": ["local", "provider"]}},
            "models": {"m": {"route": "local-then-provider"}},
        },
        health_checks=False,
    ).start()
    try:
        upstreams["A"].script([("counter", None)], [("close",)], [("counter", None)])
        upstreams["C"].script([("counter", None)])
        with openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0) as client:
            raw = [client.chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "count"}])
                   for _ in range(2)]
        assert [r.headers["x-kvgate-endpoint"] for r in raw] == ["A", "A"]
        assert all(r.parse().choices[0].message.content for r in raw)
        assert upstreams["C"].requests == []
        assert len(upstreams["A"].requests) == 3  # the second request twice: the closed connection, then a fresh one
        text = httpx.get(gateway.url + "/metrics", timeout=10).text
        assert metric(text, "kvgate_upstream_failures_total") == 0
        assert metric(text, "kvgate_failovers_total") == 0
    finally:
        gateway.stop()
