"""The native HTTP/1.1 upstream client (``gateway/upstream/native.py``) against hand-written bytes on loopback TCP.

Each test checks one promise of the module's docstring. Servers are raw ``asyncio.start_server``
handlers that write HTTP/1.1 by hand, so a test decides exactly which bytes arrive, when the
connection breaks, and can count the TCP connections the client opened. No mocks: a wrong
framing, a leaked pool slot or a reused dead connection shows up as a real failure.

A few tests read private attributes of the client (``_conn``, ``_paused``, ``_buffered``,
``_lost``, ``_idle``); each such place says why. They are there only to wait for an event that has
no public signal (the client noticed a FIN) or to measure what the promise is about (how many
bytes it buffers).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

import pytest
import pytest_asyncio

from gateway.errors import UpstreamError, UpstreamTimeoutError
from gateway.config import UpstreamSettings
from gateway.upstream import native
from gateway.upstream.native import NativeUpstream
from tests.support.loopback import until

BROKEN = "connection closed before the response body was complete"
HEAD_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
FIRST = b'data: {"n": 1}\n\n'
SECOND = b'data: {"n": 2}\n\n'
PATH = "/v1/chat/completions"
WAIT_S = 1.5  # upper bound for things that should happen at once; only reached when a test fails


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _ok(body: bytes, extra: bytes = b"", status: bytes = b"200 OK") -> bytes:
    """A complete keep-alive response framed by Content-Length."""
    return b"HTTP/1.1 " + status + b"\r\n" + extra + b"Content-Length: %d\r\n\r\n" % len(body) + body


async def _until(predicate: Callable[[], bool], what: str) -> None:
    """Poll ``predicate`` until true (for events with no awaitable signal); fail after ``WAIT_S``."""
    await until(predicate, what, timeout_s=WAIT_S, every_s=0.005)


async def _drain_body(response: native._Response) -> bytes:
    """All of a body through ``next_chunk`` (until ``b""``)."""
    parts = []
    while chunk := await asyncio.wait_for(response.next_chunk(), WAIT_S):
        parts.append(chunk)
    return b"".join(parts)


async def _take(response: native._Response, size: int) -> bytes:
    """Exactly ``size`` bytes through ``next_chunk`` (TCP may split a write; the test must not depend on it)."""
    data = b""
    while len(data) < size:
        chunk = await asyncio.wait_for(response.next_chunk(), WAIT_S)
        assert chunk, f"body ended after {len(data)} of {size} bytes"
        data += chunk
    return data


class Conn:
    """One TCP connection as the server sees it."""

    def __init__(self, index: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.index = index
        self.reader = reader
        self.writer = writer
        self.requests: list[bytes] = []
        self.client_closed = asyncio.Event()  # the client closed or reset this connection

    async def read_request(self) -> bytes | None:
        """The next request (head and Content-Length body), or None once the client closed the connection."""
        try:
            head = await self.reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            request = head + await self.reader.readexactly(length)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.client_closed.set()
            return None
        self.requests.append(request)
        return request

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def serve(self, response: bytes) -> None:
        """Answer every request on this connection with ``response`` until the client closes it."""
        while await self.read_request() is not None:
            await self.send(response)

    async def until_client_closes(self) -> None:
        """Read (and ignore) until the client closes the connection."""
        while await self.read_request() is not None:
            pass


Handler = Callable[[Conn], Awaitable[None]]


class Endpoint:
    """A loopback HTTP server whose every connection runs ``handler``; counts accepted connections."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1") -> None:
        self.handler = handler
        self.host = host
        self.conns: list[Conn] = []
        self.server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = Conn(len(self.conns), reader, writer)
        self.conns.append(conn)
        try:
            await self.handler(conn)
        except ConnectionError:
            conn.client_closed.set()
        finally:
            writer.close()

    async def start(self) -> Endpoint:
        self.server = await asyncio.start_server(self._accept, self.host, 0)
        return self

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        tasks = [task for task in self._tasks if not task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.server.wait_closed()
        await asyncio.sleep(0)  # let the closed transports finish

    @property
    def port(self) -> int:
        assert self.server is not None
        return int(self.server.sockets[0].getsockname()[1])

    def url(self, path: str = PATH) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{path}"

    @property
    def accepted(self) -> int:
        return len(self.conns)

    @property
    def requests(self) -> list[bytes]:
        return [request for conn in self.conns for request in conn.requests]


StartEndpoint = Callable[[Handler], Awaitable[Endpoint]]
MakePool = Callable[..., NativeUpstream]


@pytest_asyncio.fixture
async def start_endpoint() -> AsyncIterator[StartEndpoint]:
    endpoints: list[Endpoint] = []

    async def start(handler: Handler) -> Endpoint:
        endpoint = await Endpoint(handler).start()
        endpoints.append(endpoint)
        return endpoint

    yield start
    for endpoint in endpoints:
        await endpoint.stop()


@pytest_asyncio.fixture
async def make_pool() -> AsyncIterator[MakePool]:
    pools: list[NativeUpstream] = []

    def make(**settings: float) -> NativeUpstream:
        pool = NativeUpstream(UpstreamSettings(**settings))  # type: ignore[arg-type]
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        await pool.aclose()


async def _post(
    pool: NativeUpstream,
    url: str,
    body: bytes = b"{}",
    headers: Mapping[str, str] | None = None,
    connect_timeout_s: float = WAIT_S,
) -> native._Response:
    """``post``, bounded so that a client bug (a request that never gets its answer) fails the test
    instead of hanging it.
    """
    return await asyncio.wait_for(pool.post(url, body, headers or {}, connect_timeout_s), WAIT_S)


async def _get(pool: NativeUpstream, url: str, body: bytes = b"{}") -> bytes:
    """One whole exchange: POST, then ``read`` (which hands the connection back)."""
    response = await _post(pool, url, body, {"Content-Type": "application/json"})
    assert response.status == 200
    return await asyncio.wait_for(response.read(), WAIT_S)


async def _serve_ok(conn: Conn) -> None:
    await conn.serve(_ok(b"ok"))


# -- framing -------------------------------------------------------------------------------------


async def test_content_length_body_is_read_whole(start_endpoint: StartEndpoint, make_pool: MakePool) -> None:
    """``read`` returns exactly the Content-Length body; status and (lower-cased) headers come with ``post``."""
    body = b'{"id": "cmpl-1", "choices": []}'

    async def handler(conn: Conn) -> None:
        await conn.serve(_ok(body, b"Content-Type: application/json\r\nX-Request-Id: abc\r\n", b"201 Created"))

    endpoint = await start_endpoint(handler)
    pool = make_pool()
    response = await _post(pool, endpoint.url())
    assert response.status == 201
    assert response.headers["content-type"] == "application/json"
    assert response.headers["x-request-id"] == "abc"
    assert await asyncio.wait_for(response.read(), WAIT_S) == body


async def test_chunked_body_arrives_piece_by_piece_then_empty(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """``next_chunk`` hands out a chunk while the endpoint is still generating (streaming), then
    ``b""`` at the end.
    """
    go_on = asyncio.Event()

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(HEAD_CHUNKED + _chunk(FIRST))
        await go_on.wait()
        await conn.send(_chunk(SECOND) + b"0\r\n\r\n")
        await conn.until_client_closes()

    endpoint = await start_endpoint(handler)
    response = await _post(make_pool(), endpoint.url())
    assert response.status == 200
    assert response.headers["transfer-encoding"] == "chunked"
    # The server has not sent SECOND yet: FIRST must come out on its own, without chunk framing.
    assert await _take(response, len(FIRST)) == FIRST
    go_on.set()
    assert await _take(response, len(SECOND)) == SECOND
    assert await asyncio.wait_for(response.next_chunk(), WAIT_S) == b""
    assert await asyncio.wait_for(response.next_chunk(), WAIT_S) == b""  # the end stays the end
    response.release()


@pytest.mark.parametrize("how", ["read", "next_chunk"])
async def test_body_framed_by_connection_close_is_complete(
    start_endpoint: StartEndpoint, make_pool: MakePool, how: str
) -> None:
    """No Content-Length, no chunking: the body ends with the connection, and that end is success, not an error."""

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nfirst part, ")
        await conn.send(b"second part")
        # the handler's end closes the connection cleanly (FIN)

    endpoint = await start_endpoint(handler)
    response = await _post(make_pool(), endpoint.url())
    assert response.status == 200
    if how == "read":
        body = await asyncio.wait_for(response.read(), WAIT_S)
    else:
        body = await _drain_body(response)
        response.release()
    assert body == b"first part, second part"


async def test_close_framed_body_ended_by_a_reset_is_not_complete(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """No declared length and the connection ends with a reset (not a clean close): that is a break,
    not the end of the body.
    """

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\npartial")
        sock = conn.writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close -> RST
        conn.writer.transport.abort()

    endpoint = await start_endpoint(handler)
    response = await _post(make_pool(), endpoint.url())
    received = b""
    with pytest.raises(UpstreamError, match=BROKEN):
        while True:
            chunk = await asyncio.wait_for(response.next_chunk(), WAIT_S)
            assert chunk, "a reset must not end the body like a clean close"
            received += chunk
    assert b"partial".startswith(received)


async def test_no_content_response_is_complete_and_keeps_the_connection(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """A 204 has no body by definition: ``read`` returns ``b""`` at once and the connection is reused."""

    async def handler(conn: Conn) -> None:
        await conn.serve(b"HTTP/1.1 204 No Content\r\nX-Seen: 1\r\n\r\n")

    endpoint = await start_endpoint(handler)
    pool = make_pool()
    for _ in range(2):
        response = await _post(pool, endpoint.url())
        assert response.status == 204
        assert await asyncio.wait_for(response.read(), WAIT_S) == b""
    assert endpoint.accepted == 1


@pytest.mark.parametrize(
    "head, sent",
    [(HEAD_CHUNKED, _chunk(FIRST)), (b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n", FIRST)],
    ids=["chunked", "content-length"],
)
async def test_body_cut_short_hands_out_received_bytes_then_raises(
    start_endpoint: StartEndpoint, make_pool: MakePool, head: bytes, sent: bytes
) -> None:
    """A framed body that ends early: the bytes that did arrive come out first, then UpstreamError
    (tokens the engine sent must not be lost).
    """

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(head + sent)  # then close without the rest of the body

    endpoint = await start_endpoint(handler)
    response = await _post(make_pool(), endpoint.url())
    # private: wait until the client has seen the break, so the bytes sit unread when it is noticed
    await _until(lambda: response._conn._lost, "the client notices the connection closed")
    received = b""
    with pytest.raises(UpstreamError, match=BROKEN):
        while True:
            chunk = await asyncio.wait_for(response.next_chunk(), WAIT_S)
            assert chunk, "a cut-short body must not end like a complete one"
            received += chunk
    assert received == FIRST


async def test_read_of_a_body_cut_short_raises(start_endpoint: StartEndpoint, make_pool: MakePool) -> None:
    """``read`` of a Content-Length body the endpoint did not finish raises instead of returning a truncated body."""

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")

    endpoint = await start_endpoint(handler)
    response = await _post(make_pool(), endpoint.url())
    with pytest.raises(UpstreamError, match=BROKEN):
        await asyncio.wait_for(response.read(), WAIT_S)


async def test_interim_1xx_response_is_skipped(start_endpoint: StartEndpoint, make_pool: MakePool) -> None:
    """A ``100 Continue`` before the real response is not the response (its headers neither), and the
    connection stays usable.
    """

    async def handler(conn: Conn) -> None:
        while await conn.read_request() is not None:
            await conn.send(b"HTTP/1.1 100 Continue\r\nX-Interim: yes\r\n\r\n" + _ok(b"final", b"X-Final: yes\r\n"))

    endpoint = await start_endpoint(handler)
    pool = make_pool()
    response = await _post(pool, endpoint.url())
    assert response.status == 200
    assert response.headers.get("x-final") == "yes"
    assert "x-interim" not in response.headers
    assert await asyncio.wait_for(response.read(), WAIT_S) == b"final"
    assert await _get(pool, endpoint.url()) == b"final"  # the parser is in step for the next exchange
    assert endpoint.accepted == 1


# -- the request on the wire ---------------------------------------------------------------------


def _parse_request(raw: bytes) -> tuple[bytes, list[tuple[bytes, bytes]], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    request_line, *lines = head.split(b"\r\n")
    headers = [(name.strip().lower(), value.strip()) for name, _, value in (line.partition(b":") for line in lines)]
    return request_line, headers, body


async def test_request_bytes_on_the_wire(start_endpoint: StartEndpoint, make_pool: MakePool) -> None:
    """The endpoint receives the method, path and query, Host with the port, Content-Length, the given
    headers and the body.
    """
    endpoint = await start_endpoint(_serve_ok)
    body = b'{"model": "m", "prompt": "hi"}'
    headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-test", "X-Request-Id": "r-1"}
    response = await _post(make_pool(), endpoint.url(PATH + "?api-version=2&x=y"), body, headers)
    await asyncio.wait_for(response.read(), WAIT_S)

    [raw] = endpoint.requests
    request_line, sent, received_body = _parse_request(raw)
    assert request_line == f"POST {PATH}?api-version=2&x=y HTTP/1.1".encode()
    assert sent.count((b"host", f"127.0.0.1:{endpoint.port}".encode())) == 1
    assert [value for name, value in sent if name == b"content-length"] == [str(len(body)).encode()]
    assert (b"content-type", b"application/json") in sent
    assert (b"authorization", b"Bearer sk-test") in sent
    assert (b"x-request-id", b"r-1") in sent
    assert received_body == body


async def test_large_body_arrives_whole_in_pieces(start_endpoint: StartEndpoint, make_pool: MakePool) -> None:
    """A body over ``PIECE_BYTES`` (written a piece per loop turn) arrives byte for byte, and the
    connection is reused after it; the loop runs other callbacks between the pieces."""
    from gateway.upstream.connection import PIECE_BYTES

    endpoint = await start_endpoint(_serve_ok)
    pool = make_pool()
    body = bytes(range(256)) * (PIECE_BYTES * 5 // 256 + 7)  # not a whole number of pieces
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    try:
        assert await _get(pool, endpoint.url(), body) == b"ok"
        assert await _get(pool, endpoint.url(), b"{}") == b"ok"
    finally:
        task.cancel()
    first, second = endpoint.requests
    assert _parse_request(first)[2] == body
    assert _parse_request(second)[2] == b"{}"
    assert endpoint.accepted == 1
    assert ticks >= 5  # the loop turned between the pieces


async def test_large_body_to_a_slow_reader_waits_for_the_transport(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """A reader that takes a large body slowly pauses the client's writing (pause_writing); the
    body still arrives whole once it reads."""
    release = asyncio.Event()

    async def slow(conn: Conn) -> None:
        await release.wait()
        await conn.serve(_ok(b"ok"))

    endpoint = await start_endpoint(slow)
    pool = make_pool()
    body = b"x" * (16 * 1024 * 1024)  # more than the socket buffers hold
    request = asyncio.create_task(_get(pool, endpoint.url(), body))
    await _until(lambda: endpoint.accepted == 1, "the connection")
    await asyncio.sleep(0.05)
    [conn] = list(pool._open)  # no public signal: the client's writing is paused by the full transport
    assert conn._write_paused and conn._pending
    release.set()
    assert await asyncio.wait_for(request, 10) == b"ok"
    assert _parse_request(endpoint.requests[0])[2] == body


async def test_answer_before_the_body_is_written_does_not_reuse(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """An endpoint that answers (e.g. 413) before reading a large body: the answer is handed out,
    and the connection, with body bytes still unsent, is not reused."""

    async def early(conn: Conn) -> None:
        await conn.reader.readuntil(b"\r\n\r\n")
        await conn.send(_ok(b"too big", status=b"413 Payload Too Large"))
        with contextlib.suppress(ConnectionError):
            while await conn.reader.read(65536):  # the rest of the body, until the client closes
                pass
        conn.client_closed.set()

    endpoint = await start_endpoint(early)
    pool = make_pool()
    response = await _post(pool, endpoint.url(), b"x" * (16 * 1024 * 1024))
    assert response.status == 413
    assert await asyncio.wait_for(response.read(), WAIT_S) == b"too big"
    await _until(lambda: endpoint.conns[0].client_closed.is_set(), "the client closing the connection")
    assert not pool._idle  # nothing handed back for reuse


async def test_ipv6_host_header_is_bracketed(make_pool: MakePool) -> None:
    """An IPv6 endpoint gets ``Host: [::1]:port`` (a bare ``::1:port`` is not a valid Host)."""
    try:
        endpoint = await Endpoint(_serve_ok, host="::1").start()
    except OSError:
        pytest.skip("no IPv6 loopback here")
    try:
        assert await _get(make_pool(), endpoint.url()) == b"ok"
        _, sent, _ = _parse_request(endpoint.requests[0])
        assert (b"host", f"[::1]:{endpoint.port}".encode()) in sent
    finally:
        await endpoint.stop()


# -- keep-alive ----------------------------------------------------------------------------------


async def test_sequential_requests_reuse_one_connection(start_endpoint: StartEndpoint, make_pool: MakePool) -> None:
    """Keep-alive: a second request after ``read`` goes over the same TCP connection."""
    endpoint = await start_endpoint(_serve_ok)
    pool = make_pool()
    for _ in range(3):
        assert await _get(pool, endpoint.url()) == b"ok"
    assert endpoint.accepted == 1
    assert len(endpoint.conns[0].requests) == 3


async def test_release_reuses_the_connection_close_does_not(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """After ``release`` the connection serves the next request; after ``close`` it is dropped (the
    endpoint sees it go).
    """
    endpoint = await start_endpoint(_serve_ok)
    pool = make_pool()

    response = await _post(pool, endpoint.url())
    assert await _drain_body(response) == b"ok"
    response.release()
    response = await _post(pool, endpoint.url())
    assert endpoint.accepted == 1  # released: reused

    assert await _drain_body(response) == b"ok"
    response.close()
    await asyncio.wait_for(endpoint.conns[0].client_closed.wait(), WAIT_S)
    assert await _get(pool, endpoint.url()) == b"ok"
    assert endpoint.accepted == 2  # closed: a new connection


async def test_release_before_the_body_ends_does_not_reuse(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """``release`` with body bytes still to come cannot reuse the connection (the rest would be read as
    the next response).
    """

    async def handler(conn: Conn) -> None:
        if conn.index == 0:
            await conn.read_request()
            await conn.send(HEAD_CHUNKED + _chunk(FIRST))  # and more to come, never sent
            await conn.until_client_closes()
        else:
            await _serve_ok(conn)

    endpoint = await start_endpoint(handler)
    pool = make_pool()
    response = await _post(pool, endpoint.url())
    assert await _take(response, len(FIRST)) == FIRST
    response.release()
    assert await _get(pool, endpoint.url()) == b"ok"
    assert endpoint.accepted == 2
    await asyncio.wait_for(endpoint.conns[0].client_closed.wait(), WAIT_S)


@pytest.mark.parametrize(
    "response",
    [_ok(b"ok", b"Connection: close\r\n"), b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"],
    ids=["connection-close", "http-1.0"],
)
async def test_response_that_ends_keep_alive_is_not_reused(
    start_endpoint: StartEndpoint, make_pool: MakePool, response: bytes
) -> None:
    """``Connection: close`` (or HTTP/1.0 without keep-alive) from the endpoint: the next request opens
    a new connection.
    """

    async def handler(conn: Conn) -> None:
        await conn.serve(response)  # keeps the socket open: only the header says "do not reuse"

    endpoint = await start_endpoint(handler)
    pool = make_pool()
    assert await _get(pool, endpoint.url()) == b"ok"
    assert await _get(pool, endpoint.url()) == b"ok"
    assert endpoint.accepted == 2
    assert endpoint.conns[0].requests and len(endpoint.conns[0].requests) == 1


async def test_keepalive_zero_opens_a_connection_per_request(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """``keepalive_s = 0``: every request gets a new connection, and the old one is closed, not left open."""
    endpoint = await start_endpoint(_serve_ok)
    pool = make_pool(keepalive_s=0)
    assert await _get(pool, endpoint.url()) == b"ok"
    assert await _get(pool, endpoint.url()) == b"ok"
    assert endpoint.accepted == 2
    await asyncio.wait_for(endpoint.conns[0].client_closed.wait(), WAIT_S)


async def test_idle_connection_older_than_keepalive_is_not_reused(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """A connection idle longer than ``keepalive_s`` is dropped, not reused (the endpoint may have timed it out)."""
    endpoint = await start_endpoint(_serve_ok)
    pool = make_pool(keepalive_s=0.05)
    assert await _get(pool, endpoint.url()) == b"ok"
    await asyncio.sleep(0.15)
    assert await _get(pool, endpoint.url()) == b"ok"
    assert endpoint.accepted == 2
    await asyncio.wait_for(endpoint.conns[0].client_closed.wait(), WAIT_S)


async def test_connection_closed_by_the_endpoint_while_idle_is_not_handed_out(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """The endpoint closes a keep-alive connection while it sits idle: the next request uses a new one
    and succeeds.
    """
    hang_up = asyncio.Event()

    async def handler(conn: Conn) -> None:
        if conn.index == 0:
            await conn.read_request()
            await conn.send(_ok(b"ok"))
            await hang_up.wait()  # then close (the handler returns)
        else:
            await _serve_ok(conn)

    endpoint = await start_endpoint(handler)
    pool = make_pool()
    response = await _post(pool, endpoint.url())
    first = response._conn  # private: the connection object, to wait until the client has seen the FIN
    assert await asyncio.wait_for(response.read(), WAIT_S) == b"ok"
    assert first in pool._idle[first.origin]  # private: it really went idle (else this test proves nothing)
    hang_up.set()
    await _until(lambda: first._lost, "the client notices the endpoint closed the idle connection")
    assert await _get(pool, endpoint.url()) == b"ok"
    assert endpoint.accepted == 2


async def test_idle_connections_are_reused_last_in_first_out(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """Of two idle connections the most recently released one serves the next request (LIFO keeps the pool small)."""
    endpoint = await start_endpoint(_serve_ok)
    pool = make_pool()
    a = await _post(pool, endpoint.url())
    b = await _post(pool, endpoint.url())
    assert endpoint.accepted == 2
    await asyncio.wait_for(b.read(), WAIT_S)  # conn 1 released first
    await asyncio.wait_for(a.read(), WAIT_S)  # conn 0 released last
    assert await _get(pool, endpoint.url()) == b"ok"
    assert [len(conn.requests) for conn in endpoint.conns] == [2, 1]


# -- the pool limit ------------------------------------------------------------------------------


async def test_pool_limit_makes_a_request_wait_for_a_release(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """``pool_size = 1``: a second request waits (no second connection) until the first releases, then reuses it."""
    endpoint = await start_endpoint(_serve_ok)
    pool = make_pool(pool_size=1)
    first = await _post(pool, endpoint.url())
    second = asyncio.create_task(_post(pool, endpoint.url()))
    await asyncio.sleep(0.05)
    assert not second.done()
    assert endpoint.accepted == 1 and len(endpoint.requests) == 1
    assert await asyncio.wait_for(first.read(), WAIT_S) == b"ok"  # releases the connection
    response = await asyncio.wait_for(second, WAIT_S)
    assert await asyncio.wait_for(response.read(), WAIT_S) == b"ok"
    assert endpoint.accepted == 1 and len(endpoint.requests) == 2


async def test_waiting_for_a_pool_slot_is_bounded_by_the_connect_timeout(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """A request that waits for a free connection longer than ``connect_timeout_s`` gets
    UpstreamTimeoutError; the pool still works after.
    """
    endpoint = await start_endpoint(_serve_ok)
    pool = make_pool(pool_size=1)
    first = await _post(pool, endpoint.url())
    with pytest.raises(UpstreamTimeoutError, match="timed out"):
        await asyncio.wait_for(pool.post(endpoint.url(), b"{}", {}, 0.1), WAIT_S)
    first.release()
    assert await _get(pool, endpoint.url()) == b"ok"
    assert endpoint.accepted == 1


async def test_a_wake_up_is_not_lost_when_the_woken_request_times_out(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """A free connection goes to the next waiting request even if the one it was handed to timed out meanwhile.

    Sets up, deterministically, the race of a busy loop: ``release`` wakes waiter A, and A's own
    connect timeout fires in the same loop iteration, before A runs. A may time out; B (long
    timeout) must then get the connection instead of sleeping next to a free one.
    """
    endpoint = await start_endpoint(_serve_ok)
    pool = make_pool(pool_size=1)
    loop = asyncio.get_running_loop()
    held = await _post(pool, endpoint.url())
    timeout_a = 0.05
    before_a = loop.time()
    a = asyncio.create_task(pool.post(endpoint.url(), b"{}", {}, timeout_a))
    await asyncio.sleep(0)  # A is now waiting for the slot, its deadline at or after before_a + timeout_a
    b = asyncio.create_task(pool.post(endpoint.url(), b"{}", {}, 30.0))
    await asyncio.sleep(0)
    assert not a.done() and not b.done()
    loop.call_at(before_a + timeout_a - 0.01, held.release)  # due just before A's deadline ...
    time.sleep(timeout_a + 0.05)  # noqa: ASYNC251 (deliberate) ... block the loop: both timers run in one iteration
    with contextlib.suppress(UpstreamTimeoutError):
        await asyncio.wait_for(a, WAIT_S)
    response = await asyncio.wait_for(b, WAIT_S)
    assert await asyncio.wait_for(response.read(), WAIT_S) == b"ok"


async def test_pool_limit_counts_all_endpoints_and_evicts_an_idle_connection(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """``pool_size`` is for all endpoints together: a request to B closes A's idle connection instead of waiting."""
    a = await start_endpoint(_serve_ok)
    b = await start_endpoint(_serve_ok)
    pool = make_pool(pool_size=1)
    assert await _get(pool, a.url()) == b"ok"  # A's connection now idle, holding the only slot
    assert await _get(pool, b.url()) == b"ok"
    await asyncio.wait_for(a.conns[0].client_closed.wait(), WAIT_S)


async def test_request_waiting_for_another_endpoint_wakes_on_release(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """A request to B waiting for the only slot proceeds when A's connection is released idle (it evicts it)."""
    a = await start_endpoint(_serve_ok)
    b = await start_endpoint(_serve_ok)
    pool = make_pool(pool_size=1)
    held = await _post(pool, a.url())
    waiting = asyncio.create_task(_post(pool, b.url()))
    await asyncio.sleep(0.05)
    assert not waiting.done() and b.accepted == 0
    await asyncio.wait_for(held.read(), WAIT_S)
    response = await asyncio.wait_for(waiting, WAIT_S)
    assert await asyncio.wait_for(response.read(), WAIT_S) == b"ok"
    await asyncio.wait_for(a.conns[0].client_closed.wait(), WAIT_S)


# -- errors --------------------------------------------------------------------------------------


async def test_connection_refused_is_an_upstream_error_without_the_address(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """Refused -> UpstreamError("connection failed (...)"); clients see the message, so it never names
    host or port. The slot is freed.
    """
    with socket.socket() as closed_port:  # bound, not listening: a connect is refused
        closed_port.bind(("127.0.0.1", 0))
        port = closed_port.getsockname()[1]
        pool = make_pool(pool_size=1)
        with pytest.raises(UpstreamError) as caught:
            await asyncio.wait_for(pool.post(f"http://127.0.0.1:{port}{PATH}", b"{}", {}, WAIT_S), WAIT_S)
    message = str(caught.value)
    assert "connection failed" in message
    assert "127.0.0.1" not in message and str(port) not in message
    endpoint = await start_endpoint(_serve_ok)
    assert await _get(pool, endpoint.url()) == b"ok"  # the failed connect gave its slot back


async def test_a_host_name_that_does_not_resolve_says_so_without_the_name(
    make_pool: MakePool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The resolver's ``gaierror`` carries an ``EAI_*`` code (-2), which ``os.strerror`` reads as
    "Unknown error -2": the message gives the resolver's words instead, and never the host."""
    loop = asyncio.get_running_loop()

    async def unresolvable(host: str, *args: object, **kwargs: object) -> list:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(loop, "getaddrinfo", unresolvable)
    pool = make_pool(pool_size=1)
    with pytest.raises(UpstreamError) as caught:
        await asyncio.wait_for(pool.post(f"http://no-such-endpoint.example{PATH}", b"{}", {}, WAIT_S), WAIT_S)
    message = str(caught.value)
    assert message == "connection failed (name resolution failed: Name or service not known)"
    assert "no-such-endpoint" not in message and "Unknown error" not in message


async def test_endpoint_closing_before_the_status_line_is_server_disconnected(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """The endpoint reads the request and closes without answering -> UpstreamError("server disconnected")."""

    async def handler(conn: Conn) -> None:
        await conn.read_request()  # and close

    endpoint = await start_endpoint(handler)
    pool = make_pool(pool_size=1)
    with pytest.raises(UpstreamError, match="server disconnected"):
        await asyncio.wait_for(pool.post(endpoint.url(), b"{}", {}, WAIT_S), WAIT_S)
    with pytest.raises(UpstreamError, match="server disconnected"):  # the slot came back: not a timeout
        await asyncio.wait_for(pool.post(endpoint.url(), b"{}", {}, WAIT_S), WAIT_S)
    assert endpoint.accepted == 2


@pytest.mark.parametrize(
    "garbage",
    [b"SSH-2.0-OpenSSH_9.6\r\n\r\n", b"HTTP/1.1 2x0 OK\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n"],
    ids=["not-http", "bad-status", "bad-length"],
)
async def test_invalid_http_response_is_an_upstream_error(
    start_endpoint: StartEndpoint, make_pool: MakePool, garbage: bytes
) -> None:
    """Bytes that are not an HTTP/1.1 response -> UpstreamError, the connection dropped, the slot freed."""

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(garbage)
        await conn.until_client_closes()

    endpoint = await start_endpoint(handler)
    pool = make_pool(pool_size=1)
    with pytest.raises(UpstreamError, match="invalid HTTP response"):
        await asyncio.wait_for(pool.post(endpoint.url(), b"{}", {}, WAIT_S), WAIT_S)
    await asyncio.wait_for(endpoint.conns[0].client_closed.wait(), WAIT_S)
    good = await start_endpoint(_serve_ok)
    assert await _get(pool, good.url()) == b"ok"


@contextlib.asynccontextmanager
async def _blackhole() -> AsyncIterator[int]:
    """A loopback port whose accept queue is full, so a new connect's SYN is dropped and the connect hangs (Linux).

    Deterministic and local, unlike a non-routable address (this sandbox, for one, answers those).
    Skips the test where the trick does not make a connect hang.
    """
    loop = asyncio.get_running_loop()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers: list[socket.socket] = []
    try:
        for _ in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            fillers.append(filler)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
        await asyncio.sleep(0.02)
        with socket.socket() as check:
            check.setblocking(False)
            try:
                await asyncio.wait_for(loop.sock_connect(check, ("127.0.0.1", port)), 0.2)
            except TimeoutError:
                pass
            else:
                pytest.skip("this kernel completes a connect even to a full accept queue, so a hanging connect cannot be staged here")
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


async def test_connect_timeout_is_an_upstream_timeout(start_endpoint: StartEndpoint, make_pool: MakePool) -> None:
    """A TCP connect that does not finish within ``connect_timeout_s`` -> UpstreamTimeoutError("timed
    out"); the slot is freed.
    """
    pool = make_pool(pool_size=1)
    async with _blackhole() as port:
        with pytest.raises(UpstreamTimeoutError, match="timed out"):
            await asyncio.wait_for(pool.post(f"http://127.0.0.1:{port}{PATH}", b"{}", {}, 0.1), WAIT_S)
    endpoint = await start_endpoint(_serve_ok)
    assert await _get(pool, endpoint.url()) == b"ok"


# -- probe ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [200, 503])
async def test_probe_returns_the_status_of_a_get(
    start_endpoint: StartEndpoint, make_pool: MakePool, status: int
) -> None:
    """``probe`` sends a GET to the URL and returns the endpoint's status, whatever it is."""

    async def handler(conn: Conn) -> None:
        await conn.serve(_ok(b"health", status=f"{status} Whatever".encode()))

    endpoint = await start_endpoint(handler)
    assert await make_pool().probe(endpoint.url("/health"), WAIT_S) == status
    [raw] = endpoint.requests
    assert raw.startswith(b"GET /health HTTP/1.1\r\n")


@pytest.mark.parametrize("stall", ["before-head", "in-body"])
async def test_probe_of_a_silent_endpoint_times_out_without_leaking(
    start_endpoint: StartEndpoint, make_pool: MakePool, stall: str
) -> None:
    """An endpoint that stops answering -> UpstreamTimeoutError after ``timeout_s``; its connection is
    closed and the slot freed.
    """

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        if stall == "in-body":
            await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await conn.until_client_closes()

    silent = await start_endpoint(handler)
    pool = make_pool(pool_size=1)
    with pytest.raises(UpstreamTimeoutError, match="timed out"):
        await asyncio.wait_for(pool.probe(silent.url("/health"), 0.1), WAIT_S)
    await asyncio.wait_for(silent.conns[0].client_closed.wait(), WAIT_S)
    good = await start_endpoint(_serve_ok)
    assert await asyncio.wait_for(pool.probe(good.url("/health"), WAIT_S), WAIT_S) == 200


# -- flow control --------------------------------------------------------------------------------

BIG = b"".join(i.to_bytes(4, "big") for i in range(512 * 1024))  # 2 MiB, every 4 bytes distinct: order is checked


async def test_slow_reader_pauses_the_endpoint_instead_of_buffering_everything(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """An endpoint writing 2 MiB at once to a reader that has not read yet: the client stops at ~256
    KiB, then delivers every byte in order.
    """
    sent = asyncio.Event()

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(BIG) + BIG)
        sent.set()
        await conn.until_client_closes()

    endpoint = await start_endpoint(handler)
    response = await _post(make_pool(), endpoint.url())
    conn = response._conn  # private: _paused/_buffered are what the promise is about (bytes held for the reader)
    await _until(lambda: conn._paused, "reading from the endpoint pauses")
    await asyncio.sleep(0.05)  # time for more data to arrive if reading had not really stopped
    # One read past the 256 KiB mark is allowed (the transport reads up to 256 KiB at a time).
    assert conn._buffered <= 2 * native._HIGH_WATER
    assert await _drain_body(response) == BIG
    response.release()
    await asyncio.wait_for(sent.wait(), WAIT_S)


async def test_read_of_a_body_larger_than_the_high_water_mark(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """``read`` of a 2 MiB body returns all of it: flow control must not stall a reader that waits for the whole body.

    Regression: ``read`` used to wait for the end without taking the buffered bytes, so reading paused
    at 256 KiB and never resumed (``read`` hung).
    """

    async def handler(conn: Conn) -> None:
        await conn.serve(_ok(BIG))

    endpoint = await start_endpoint(handler)
    response = await _post(make_pool(), endpoint.url())
    assert await asyncio.wait_for(response.read(), WAIT_S) == BIG


async def test_probe_of_an_endpoint_with_a_large_body(start_endpoint: StartEndpoint, make_pool: MakePool) -> None:
    """``probe`` of an endpoint whose answer is 2 MiB still returns its status (it reads the body with
    ``read``: same regression).
    """

    async def handler(conn: Conn) -> None:
        await conn.serve(_ok(BIG))

    endpoint = await start_endpoint(handler)
    assert await make_pool().probe(endpoint.url("/metrics"), WAIT_S) == 200


# -- shutdown ------------------------------------------------------------------------------------


async def test_aclose_closes_idle_and_busy_connections(start_endpoint: StartEndpoint, make_pool: MakePool) -> None:
    """``aclose`` closes every open connection, idle or mid-response, and refuses new requests."""

    async def handler(conn: Conn) -> None:
        if conn.index == 0:
            await _serve_ok(conn)
        else:
            await conn.read_request()
            await conn.send(HEAD_CHUNKED + _chunk(FIRST))  # a stream still going
            await conn.until_client_closes()

    endpoint = await start_endpoint(handler)
    pool = make_pool(pool_size=2)
    first = await _post(pool, endpoint.url())  # opens connection 0
    assert await asyncio.wait_for(first.read(), WAIT_S) == b"ok"  # connection 0 is now idle
    again = await _post(pool, endpoint.url())  # reuses connection 0 ...
    stream = await _post(pool, endpoint.url())  # ... so this one opens connection 1: a stream that stays open
    assert await asyncio.wait_for(again.read(), WAIT_S) == b"ok"  # connection 0 idle again, 1 mid-response
    assert endpoint.accepted == 2

    await pool.aclose()
    for conn in endpoint.conns:
        await asyncio.wait_for(conn.client_closed.wait(), WAIT_S)
    with pytest.raises(UpstreamError):
        await _post(pool, endpoint.url())
    assert endpoint.accepted == 2
    stream.close()


async def test_aclose_wakes_requests_waiting_for_a_slot(start_endpoint: StartEndpoint, make_pool: MakePool) -> None:
    """Requests waiting for a pool slot when ``aclose`` runs (more of them than connections it closes)
    fail at once instead of hanging.
    """
    endpoint = await start_endpoint(_serve_ok)
    pool = make_pool(pool_size=1)
    held = await _post(pool, endpoint.url())
    waiting = [asyncio.create_task(pool.post(endpoint.url(), b"{}", {}, 30.0)) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert not any(task.done() for task in waiting)
    await pool.aclose()
    for task in waiting:
        with pytest.raises(UpstreamError, match="shutting down"):
            await asyncio.wait_for(task, WAIT_S)
    assert endpoint.accepted == 1
    held.close()


async def test_aclose_during_a_close_framed_body_is_not_a_complete_body(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """A body framed by the connection's end, cut off by the gateway shutting down, must not look complete.

    Regression: the client's own abort reached ``connection_lost(None)``, which was taken for the
    endpoint ending a length-less body, so a truncated body read as complete.
    """

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nthe start of a long answer")
        await conn.until_client_closes()

    endpoint = await start_endpoint(handler)
    pool = make_pool()
    response = await _post(pool, endpoint.url())
    assert (await _take(response, 5)).startswith(b"the s")
    await pool.aclose()
    with pytest.raises(UpstreamError):
        while await asyncio.wait_for(response.next_chunk(), WAIT_S):
            pass


async def test_bytes_after_a_complete_answer_are_not_added_to_its_body(
    start_endpoint: StartEndpoint, make_pool: MakePool
) -> None:
    """A second, unasked-for response in the same write is dropped, and the connection is not reused."""

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok" + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nzz")
        await conn.until_client_closes()

    endpoint = await start_endpoint(handler)
    pool = make_pool()
    response = await _post(pool, endpoint.url())
    assert await asyncio.wait_for(response.read(), WAIT_S) == b"ok"
    await asyncio.wait_for(endpoint.conns[0].client_closed.wait(), WAIT_S)
