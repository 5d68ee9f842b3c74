"""kvgate's own HTTP/1.1 upstream client: asyncio protocols, the ``httptools`` parser, a keep-alive pool.

Why not aiohttp here: under ``bench/overhead`` (c=32, one core) py-spy put 21 % of the gateway's
CPU inside aiohttp's client (request building, header multidicts, the stream reader, its
timers), about 90 us per proxied request; ``bench/upstream_client.py`` measures the two clients
side by side in a minimal proxy (see ``docs/overhead.md``). The gateway needs only a small part
of HTTP/1.1 towards its endpoints: ``POST`` or ``GET`` with a body of known length, one request
at a time per connection, and responses framed by ``Content-Length``, chunked encoding or the
end of the connection. Parsing is left to ``httptools`` (llhttp, Node.js's parser); this module
only frames requests and manages connections. aiohttp stays available as
``[upstream] client = "aiohttp"``.

Semantics (those of :class:`~gateway.upstream.client.Upstream`):

* ``post`` returns once the status line and headers arrived; the body is read with ``read`` (the
  whole body; returns the connection to the pool) or ``next_chunk`` (bytes as they arrive, ``b""``
  at the end), then ``release`` (finished: reuse the connection) or ``close`` (abort: the endpoint
  sees a disconnect and stops generating).
* Bytes received before a connection breaks are handed out first; the next call raises
  :class:`~gateway.errors.UpstreamError` ("connection closed before the response body was
  complete"). A response that ends with the connection and declared no length is complete.
* Connection refused/reset -> ``UpstreamError("connection failed (<strerror>)")``; the TCP (and
  TLS) connect bounded by ``connect_timeout_s`` -> ``UpstreamTimeoutError("timed out")``. Messages
  never name the endpoint's address (clients see them).
* Pool: at most ``upstream.pool_size`` open connections in all (a request waits for one to be
  free); idle connections are reused last-in first-out and dropped after ``upstream.keepalive_s``
  idle seconds (0: a new connection per request). A reused connection that the endpoint closed
  while it sat idle is noticed (``connection_lost``) and never handed out. One that it closes
  just as the request goes out (the keep-alive race: closed or reset before any byte of an
  answer) is retried once on a fresh connection, as urllib3 and httpcore do; only that retry's
  outcome counts, so the race is never taken for the endpoint's failure.
* Flow control: a stream whose reader falls behind by more than 256 KiB pauses reading from the
  endpoint (TCP back-pressure) until the reader catches up.
* ``https://`` endpoints use TLS with the system's CA store (``ssl.create_default_context``).
* A compressed answer (``Content-Encoding``) is decoded as it arrives (``gateway/upstream/decoding.py``).
* Redirects are never followed (a 3xx is an answer like any other); with a
  :class:`~gateway.endpoints.allowlist.ConnectGuard`, an admin-added endpoint's connection goes
  only to an address inside ``admin.allowed_networks``.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections import deque
from collections.abc import Mapping
from urllib.parse import urlsplit

import httptools

from gateway.deadlines import deadline
from gateway.endpoints.allowlist import ConnectGuard
from gateway.errors import UpstreamError, UpstreamTimeoutError
from gateway.config import UpstreamSettings
from gateway.upstream.client import UpstreamResponse
from gateway.upstream.decoding import decoded

_HIGH_WATER = 256 * 1024  # bytes buffered for a slow reader before reading from the endpoint pauses
_BROKEN = "connection closed before the response body was complete"
_SSL_CONTEXT: ssl.SSLContext | None = None


def _ssl_context() -> ssl.SSLContext:
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = ssl.create_default_context()
    return _SSL_CONTEXT


class _Target:
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


class _Connection(asyncio.Protocol):
    """One keep-alive connection; carries one exchange at a time (no pipelining)."""

    __slots__ = (
        "_pool", "origin", "transport", "_parser", "_waiter", "_status", "headers", "_body", "_buffered",
        "_head_done", "_complete", "_error", "_lost", "_length_known", "_paused", "idle_since", "_busy", "_keep_alive",
        "_answered", "reused",
    )

    def __init__(self, pool: NativeUpstream, origin: tuple[str, str, int]) -> None:
        self._pool = pool
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[None] | None = None
        self._lost = False
        self._busy = False
        self.idle_since = 0.0
        self.reused = False  # handed out from the idle pool (it carried an exchange before)
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
            self._pool._discard(self)
            return
        self._answered = True
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as error:
            upgrade = isinstance(error, httptools.HttpParserUpgrade)
            self._fail(UpstreamError("unexpected protocol upgrade" if upgrade else "invalid HTTP response"))
            self._pool._discard(self)

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._pool._forget(self)
        if self._head_done and not self._complete and self._error is None:
            if exc is None and not self._length_known:
                self._complete = True  # a body framed by the end of the connection
            else:
                self._error = UpstreamError(_BROKEN)
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
        if self._buffered > _HIGH_WATER and not self._paused and self.transport is not None:
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
        waiter = self._pool._loop.create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            if self._waiter is waiter:
                self._waiter = None

    def send(self, method: bytes, target: _Target, headers: Mapping[str, str], body: bytes) -> None:
        self._reset()
        self._busy = True
        head = [method, b" ", target.path, b" HTTP/1.1\r\nHost: ", target.host_header, b"\r\n"]
        for name, value in headers.items():
            head += (name.encode("latin-1"), b": ", value.encode("latin-1"), b"\r\n")
        head += (b"Content-Length: ", str(len(body)).encode(), b"\r\n\r\n", body)
        self.transport.write(b"".join(head))  # type: ignore[union-attr]

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
        return self._complete and self._keep_alive and not self._lost

    def stale(self) -> bool:
        """A reused connection the endpoint closed before any byte of this exchange's answer."""
        return self.reused and not self._answered and self._lost


class _Response:
    """An open response on a :class:`_Connection` (the :class:`UpstreamResponse` shape)."""

    __slots__ = ("_conn", "status", "headers", "_done")

    def __init__(self, conn: _Connection) -> None:
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
            self._conn._pool._discard(self._conn)

    def release(self) -> None:
        if not self._done:
            self._done = True
            pool = self._conn._pool
            if self._conn.reusable():
                pool._put_back(self._conn)
            else:
                pool._discard(self._conn)


class NativeUpstream:
    """The production :class:`~gateway.upstream.client.Upstream` (see the module doc). Create inside a running loop."""

    def __init__(self, settings: UpstreamSettings, guard: ConnectGuard | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._guard = guard
        self._limit = settings.pool_size
        self._keepalive_s = settings.keepalive_s
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        self._open: set[_Connection] = set()
        self._slot_waiters: deque[asyncio.Future[None]] = deque()
        self._targets: dict[str, _Target] = {}
        self._closed = False

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            if len(self._targets) >= 4096:
                self._targets.clear()
            target = self._targets[url] = _Target(url)
        return target

    # -- pool ----------------------------------------------------------------------------------
    def _forget(self, conn: _Connection) -> None:
        """``conn`` is gone (closed by either side): drop it from the pool and free its slot."""
        idle = self._idle.get(conn.origin)
        if idle is not None and conn in idle:
            idle.remove(conn)
        if conn in self._open:
            self._open.discard(conn)
            self._wake_one()

    def _wake_one(self) -> None:
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _discard(self, conn: _Connection) -> None:
        if conn._busy and not conn._complete:  # our own abort: never read as the end of a length-less body
            conn._fail(UpstreamError(_BROKEN if conn._head_done else "connection closed by the gateway"))
        if conn.transport is not None and not conn._lost:
            conn.transport.abort()  # connection_lost follows (soon) and calls _forget
        self._forget(conn)

    def _put_back(self, conn: _Connection) -> None:
        if self._closed or self._keepalive_s == 0:
            self._discard(conn)
            return
        conn._busy = False
        conn.idle_since = time.monotonic()
        self._idle.setdefault(conn.origin, []).append(conn)
        self._wake_one()

    def _idle_for(self, origin: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn._lost and now - conn.idle_since < self._keepalive_s:
                conn.reused = True
                return conn
            self._discard(conn)
        return None

    def _evict_other_idle(self) -> bool:
        for idle in self._idle.values():
            if idle:
                self._discard(idle[0])
                return True
        return False

    async def _acquire(self, target: _Target, connect_timeout_s: float, fresh: bool = False) -> _Connection:
        """A connection to ``target``: an idle one (unless ``fresh``) or a new one once a slot is free."""
        while True:
            if self._closed:
                raise UpstreamError("the gateway is shutting down")
            conn = None if fresh else self._idle_for(target.origin)
            if conn is not None:
                return conn
            if len(self._open) < self._limit or self._evict_other_idle():
                return await self._connect(target, connect_timeout_s)
            waiter = self._loop.create_future()
            self._slot_waiters.append(waiter)
            try:
                with deadline(connect_timeout_s):
                    await waiter
            except BaseException as error:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # woken, then timed out or cancelled before running: pass the slot on
                if isinstance(error, TimeoutError):
                    raise UpstreamTimeoutError("timed out") from None
                raise

    async def _connect(self, target: _Target, connect_timeout_s: float) -> _Connection:
        conn = _Connection(self, target.origin)
        self._open.add(conn)  # holds the slot while connecting
        try:
            with deadline(connect_timeout_s):
                host = target.host if self._guard is None else await self._guard.address_for(target.host, target.port)
                await self._loop.create_connection(
                    lambda: conn,
                    host,
                    target.port,
                    ssl=_ssl_context() if target.tls else None,
                    server_hostname=target.host if target.tls else None,
                )
        except BaseException as error:
            self._discard(conn)  # frees the slot; aborts the transport if it was made
            if isinstance(error, TimeoutError):
                raise UpstreamTimeoutError("timed out") from None
            if isinstance(error, ssl.SSLError):
                raise UpstreamError(f"TLS handshake failed ({error.reason or type(error).__name__})") from None
            if isinstance(error, OSError):
                detail = os.strerror(error.errno) if error.errno else type(error).__name__  # never the address
                raise UpstreamError(f"connection failed ({detail})") from None
            raise
        return conn

    # -- the Upstream seam ---------------------------------------------------------------------
    async def _request(
        self, method: bytes, url: str, body: bytes, headers: Mapping[str, str], connect_timeout_s: float
    ) -> _Response:
        target = self._target(url)
        conn = await self._acquire(target, connect_timeout_s)
        try:
            conn.send(method, target, headers, body)
            await conn.head()
        except UpstreamError:
            stale = conn.stale()
            self._discard(conn)
            if not stale:
                raise
            return await self._retry_fresh(method, target, headers, body, connect_timeout_s)
        except BaseException:
            self._discard(conn)
            raise
        return _Response(conn)

    async def _retry_fresh(
        self, method: bytes, target: _Target, headers: Mapping[str, str], body: bytes, connect_timeout_s: float
    ) -> _Response:
        """The keep-alive race's one retry, on a new connection (its idle siblings may be closing too)."""
        conn = await self._acquire(target, connect_timeout_s, fresh=True)
        try:
            conn.send(method, target, headers, body)
            await conn.head()
        except BaseException:
            self._discard(conn)
            raise
        return _Response(conn)

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], connect_timeout_s: float) -> UpstreamResponse:
        return decoded(await self._request(b"POST", url, body, headers, connect_timeout_s))

    async def probe(self, url: str, timeout_s: float) -> int:
        response: _Response | None = None
        try:
            with deadline(timeout_s):
                response = await self._request(b"GET", url, b"", {}, timeout_s)
                await response.read()
        except BaseException as error:
            if response is not None:
                response.close()
            if isinstance(error, TimeoutError):
                raise UpstreamTimeoutError("timed out") from None
            raise
        return response.status

    async def aclose(self) -> None:
        self._closed = True
        for conn in list(self._open):
            self._discard(conn)
        for waiter in self._slot_waiters:
            if not waiter.done():
                waiter.set_result(None)
        await asyncio.sleep(0)  # let the transports close
