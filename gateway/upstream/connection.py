"""One HTTP/1.1 connection to an endpoint: request framing, the ``httptools`` response parser, the body buffer.

:class:`Connection` is an ``asyncio.Protocol`` that carries one exchange at a time (no
pipelining): :meth:`Connection.send` frames a request with a body of known length, the parser's
callbacks fill the status, headers and body chunks, and :class:`Response` hands them out (the
:class:`~gateway.upstream.client.UpstreamResponse` shape). A reader that falls behind by more
than :data:`HIGH_WATER` bytes pauses reading from the socket (TCP back-pressure) until it catches
up. The connection reports back to its pool (:class:`ConnectionPool`, implemented by
:class:`~gateway.upstream.native.NativeUpstream`) when it breaks, is lost, or is released. Bytes
received before a break are handed out first; the next read raises :class:`UpstreamError`.

A request body over :data:`PIECE_BYTES` is written in pieces of that size, one per event-loop turn
(``loop.call_soon``), and only while the transport is not paused (``pause_writing`` /
``resume_writing``): one ``transport.write`` of a whole large body runs the socket send of all of
it at once, which on loopback also runs the receiver's TCP path (about 7 ms per MB on a loaded
host), and blocks every other request on the loop meanwhile. The pieces are ``memoryview`` slices
of the body, the first written with the head in one ``writelines`` (a ``writev`` on uvloop), so a
body is never copied on its way to the socket; 256 KiB pieces send a 200 KB prompt in one system
call (64 KiB took four, and three more loop turns). The response is read as it comes; a
connection whose answer arrived before its body was all written is never reused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol
from urllib.parse import urlsplit

import httptools

from gateway.errors import UpstreamError

HIGH_WATER = 256 * 1024  # bytes buffered for a slow reader before reading from the endpoint pauses
PIECE_BYTES = 256 * 1024  # a request body over this is written this much per event-loop turn
JOIN_BYTES = 16 * 1024  # a body up to this goes out joined to the head; a larger one beside it (no copy)
BROKEN = "connection closed before the response body was complete"


class ConnectionPool(Protocol):
    """What a :class:`Connection` needs of the pool that owns it."""

    loop: asyncio.AbstractEventLoop

    def discard(self, conn: Connection) -> None:
        """Close ``conn`` and free its pool slot."""

    def forget(self, conn: Connection) -> None:
        """``conn`` was lost (closed by the endpoint): drop it from the idle list and free its slot."""

    def put_back(self, conn: Connection) -> None:
        """``conn`` finished an exchange and can carry another: keep it idle for reuse."""


class Target:
    """A parsed request URL: where to connect and what to put in the request line."""

    __slots__ = ("origin", "host", "port", "tls", "path", "host_header")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UpstreamError("unsupported endpoint URL")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        default_port = 443 if self.tls else 80
        self.port = parts.port or default_port
        self.origin = (parts.scheme, self.host, self.port)
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        host = f"[{self.host}]" if ":" in self.host else self.host
        try:  # a URL that skipped validation (config and admin API refuse non-ASCII): an endpoint failure
            self.path = path.encode("ascii")
            self.host_header = (host if self.port == default_port else f"{host}:{self.port}").encode("ascii")
        except UnicodeEncodeError:
            raise UpstreamError("unsupported endpoint URL") from None


class Connection(asyncio.Protocol):
    """One keep-alive connection; carries one exchange at a time (no pipelining)."""

    __slots__ = (
        "_pool", "origin", "transport", "_parser", "_waiter", "_status", "headers", "_body", "_buffered",
        "_head_done", "_complete", "_error", "_lost", "_length_known", "_paused", "idle_since", "_busy", "_keep_alive",
        "_answered", "reused", "_pending", "_offset", "_write_paused",
    )

    def __init__(self, pool: ConnectionPool, origin: tuple[str, str, int]) -> None:
        self._pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[None] | None = None
        self._lost = False
        self._busy = False
        self.idle_since = 0.0
        self.reused = False  # handed out from the idle pool (it carried an exchange before)
        self._pending: bytes | memoryview = b""  # a large request body still being written, from ``_offset``
        self._offset = 0
        self._write_paused = False
        self._reset()

    def _reset(self) -> None:
        self._status = 0
        self.headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._buffered = 0
        self._head_done = False
        self._complete = False
        self._keep_alive = False
        self._error: UpstreamError | None = None
        self._length_known = False
        self._paused = False
        self._answered = False  # a byte of this exchange's answer arrived

    # -- asyncio.Protocol --------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self._busy:  # bytes on an idle connection: nothing asked for them, never reuse it
            self._pool.discard(self)
            return
        self._answered = True
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as error:
            upgrade = isinstance(error, httptools.HttpParserUpgrade)
            self._fail(UpstreamError("unexpected protocol upgrade" if upgrade else "invalid HTTP response"))
            self._pool.discard(self)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._pending:
            self._pool.loop.call_soon(self._pump)

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._pool.forget(self)
        if self._head_done and not self._complete and self._error is None:
            if exc is None and not self._length_known:
                self._complete = True  # a body framed by the end of the connection
            else:
                self._error = UpstreamError(BROKEN)
        elif not self._head_done and self._error is None:
            self._error = UpstreamError("server disconnected")
        self._wake()

    # -- httptools callbacks ----------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self._complete:  # bytes after the answer (a second response nobody asked for): never reuse
            self._keep_alive = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._complete:
            return
        key = name.decode("latin-1").lower()
        if key == "content-length" or (key == "transfer-encoding" and b"chunked" in value.lower()):
            self._length_known = True
        self.headers[key] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        if self._complete:
            return
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim response (we never send Expect): skip it
            self.headers = {}
            self._length_known = False
            return
        self._status = status
        self._head_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self._complete:
            return
        self._body.append(body)
        self._buffered += len(body)
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if not self._head_done or self._complete:
            return
        self._complete = True
        self._keep_alive = self._parser.should_keep_alive()  # read now: the parser resets after this callback
        self._wake()

    # -- used by the response ------------------------------------------------------------------
    def _fail(self, error: UpstreamError) -> None:
        if self._error is None and not self._complete:
            self._error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self) -> None:
        waiter = self._pool.loop.create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            if self._waiter is waiter:
                self._waiter = None

    def send(self, method: bytes, target: Target, headers: Mapping[str, str], body: bytes) -> None:
        self._reset()
        self._busy = True
        head = [method, b" ", target.path, b" HTTP/1.1\r\nHost: ", target.host_header, b"\r\n"]
        for name, value in headers.items():
            head += (name.encode("latin-1"), b": ", value.encode("latin-1"), b"\r\n")
        head += (b"Content-Length: ", str(len(body)).encode(), b"\r\n\r\n")
        transport: asyncio.Transport = self.transport  # type: ignore[assignment]
        if len(body) <= JOIN_BYTES:
            head.append(body)
            transport.write(b"".join(head))
            return
        view = memoryview(body)  # pieces are views: the body is never copied on its way to the socket
        transport.writelines((b"".join(head), view[:PIECE_BYTES]))  # one writev (uvloop)
        if len(body) > PIECE_BYTES:
            self._pending, self._offset = view, PIECE_BYTES
            self._pool.loop.call_soon(self._pump)

    def _pump(self) -> None:
        """Write the next piece of the pending body (one per loop turn, none while paused)."""
        body, transport = self._pending, self.transport
        if not body or self._write_paused:
            return  # done, or resume_writing calls again
        if self._lost or self._error is not None or transport is None or transport.is_closing():
            self._pending = b""
            return
        end = self._offset + PIECE_BYTES
        transport.write(body[self._offset:end])
        if end >= len(body):
            self._pending = b""
            return
        self._offset = end
        self._pool.loop.call_soon(self._pump)

    async def head(self) -> None:
        while not self._head_done:
            if self._error is not None:
                raise self._error
            await self._wait()

    def take(self) -> bytes:
        """Bytes buffered so far (and resume reading if it was paused)."""
        body = self._body
        data = body[0] if len(body) == 1 else b"".join(body)
        self._body = []
        self._buffered = 0
        if self._paused and not self._lost:
            self._paused = False
            self.transport.resume_reading()  # type: ignore[union-attr]
        return data

    def reusable(self) -> bool:
        return self._complete and self._keep_alive and not self._lost and not self._pending

    def stale(self) -> bool:
        """A reused connection the endpoint closed before any byte of this exchange's answer."""
        return self.reused and not self._answered and self._lost


class Response:
    """An open response on a :class:`Connection` (the :class:`UpstreamResponse` shape)."""

    __slots__ = ("_conn", "status", "headers", "_done")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self.status = conn._status
        self.headers = conn.headers
        self._done = False

    async def read(self) -> bytes:
        conn = self._conn
        chunks: list[bytes] = []
        while not conn._complete:
            if conn._body:  # taken as it comes, so a body over the high-water mark resumes reading
                chunks.append(conn.take())
            elif conn._error is not None:
                self.close()
                raise conn._error
            else:
                await conn._wait()
        if conn._body:
            chunks.append(conn.take())
        self.release()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def next_chunk(self) -> bytes:
        conn = self._conn
        while True:
            if conn._body:
                return conn.take()
            if conn._complete:
                return b""
            if conn._error is not None:
                self.close()
                raise conn._error
            await conn._wait()

    def close(self) -> None:
        if not self._done:
            self._done = True
            self._conn._pool.discard(self._conn)

    def release(self) -> None:
        if not self._done:
            self._done = True
            pool = self._conn._pool
            if self._conn.reusable():
                pool.put_back(self._conn)
            else:
                pool.discard(self._conn)
