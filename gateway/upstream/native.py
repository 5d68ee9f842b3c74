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
* The connection itself (framing, parsing, back-pressure) is ``gateway/upstream/connection.py``.
* A compressed answer (``Content-Encoding``) is decoded as it arrives (``gateway/upstream/decoding.py``).
* Redirects are never followed (a 3xx is an answer like any other); with a
  :class:`~gateway.endpoints.allowlist.ConnectGuard`, an admin-added endpoint's connection goes
  only to an address inside ``admin.allowed_networks``.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import Mapping

from gateway.deadlines import deadline
from gateway.endpoints.allowlist import ConnectGuard
from gateway.errors import UpstreamError, UpstreamTimeoutError
from gateway.config import UpstreamSettings
from gateway.upstream.client import UpstreamResponse, os_error_detail
from gateway.upstream.connection import BROKEN, HIGH_WATER, Connection, Response, Target
from gateway.upstream.decoding import decoded

_SSL_CONTEXT: ssl.SSLContext | None = None


def _ssl_context() -> ssl.SSLContext:
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = ssl.create_default_context()
    return _SSL_CONTEXT


class NativeUpstream:
    """The production :class:`~gateway.upstream.client.Upstream` (see the module doc). Create inside a running loop."""

    def __init__(self, settings: UpstreamSettings, guard: ConnectGuard | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        self._guard = guard
        self._limit = settings.pool_size
        self._keepalive_s = settings.keepalive_s
        self._idle: dict[tuple[str, str, int], list[Connection]] = {}
        self._open: set[Connection] = set()
        self._slot_waiters: deque[asyncio.Future[None]] = deque()
        self._targets: dict[str, Target] = {}
        self._closed = False

    def _target(self, url: str) -> Target:
        target = self._targets.get(url)
        if target is None:
            if len(self._targets) >= 4096:
                self._targets.clear()
            target = self._targets[url] = Target(url)
        return target

    # -- pool ----------------------------------------------------------------------------------
    def forget(self, conn: Connection) -> None:
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

    def discard(self, conn: Connection) -> None:
        if conn._busy and not conn._complete:  # our own abort: never read as the end of a length-less body
            conn._fail(UpstreamError(BROKEN if conn._head_done else "connection closed by the gateway"))
        if conn.transport is not None and not conn._lost:
            conn.transport.abort()  # connection_lost follows (soon) and calls _forget
        self.forget(conn)

    def put_back(self, conn: Connection) -> None:
        if self._closed or self._keepalive_s == 0:
            self.discard(conn)
            return
        conn._busy = False
        conn.idle_since = time.monotonic()
        self._idle.setdefault(conn.origin, []).append(conn)
        self._wake_one()

    def _idle_for(self, origin: tuple[str, str, int]) -> Connection | None:
        idle = self._idle.get(origin)
        if not idle:
            return None
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn._lost and now - conn.idle_since < self._keepalive_s:
                conn.reused = True
                return conn
            self.discard(conn)
        return None

    def _evict_other_idle(self) -> bool:
        for idle in self._idle.values():
            if idle:
                self.discard(idle[0])
                return True
        return False

    async def _acquire(self, target: Target, connect_timeout_s: float, fresh: bool = False) -> Connection:
        """A connection to ``target``: an idle one (unless ``fresh``) or a new one once a slot is free."""
        while True:
            if self._closed:
                raise UpstreamError("the gateway is shutting down")
            conn = None if fresh else self._idle_for(target.origin)
            if conn is not None:
                return conn
            if len(self._open) < self._limit or self._evict_other_idle():
                return await self._connect(target, connect_timeout_s)
            waiter = self.loop.create_future()
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

    async def _connect(self, target: Target, connect_timeout_s: float) -> Connection:
        conn = Connection(self, target.origin)
        self._open.add(conn)  # holds the slot while connecting
        try:
            with deadline(connect_timeout_s):
                host = target.host if self._guard is None else await self._guard.address_for(target.host, target.port)
                await self.loop.create_connection(
                    lambda: conn,
                    host,
                    target.port,
                    ssl=_ssl_context() if target.tls else None,
                    server_hostname=target.host if target.tls else None,
                )
        except BaseException as error:
            self.discard(conn)  # frees the slot; aborts the transport if it was made
            if isinstance(error, TimeoutError):
                raise UpstreamTimeoutError("timed out") from None
            if isinstance(error, ssl.SSLError):
                raise UpstreamError(f"TLS handshake failed ({error.reason or type(error).__name__})") from None
            if isinstance(error, OSError):
                raise UpstreamError(f"connection failed ({os_error_detail(error)})") from None  # never the address
            raise
        return conn

    # -- the Upstream seam ---------------------------------------------------------------------
    async def _request(
        self, method: bytes, url: str, body: bytes, headers: Mapping[str, str], connect_timeout_s: float
    ) -> Response:
        target = self._target(url)
        conn = await self._acquire(target, connect_timeout_s)
        try:
            conn.send(method, target, headers, body)
            await conn.head()
        except UpstreamError:
            stale = conn.stale()
            self.discard(conn)
            if not stale:
                raise
            return await self._retry_fresh(method, target, headers, body, connect_timeout_s)
        except BaseException:
            self.discard(conn)
            raise
        return Response(conn)

    async def _retry_fresh(
        self, method: bytes, target: Target, headers: Mapping[str, str], body: bytes, connect_timeout_s: float
    ) -> Response:
        """The keep-alive race's one retry, on a new connection (its idle siblings may be closing too)."""
        conn = await self._acquire(target, connect_timeout_s, fresh=True)
        try:
            conn.send(method, target, headers, body)
            await conn.head()
        except BaseException:
            self.discard(conn)
            raise
        return Response(conn)

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], connect_timeout_s: float) -> UpstreamResponse:
        return decoded(await self._request(b"POST", url, body, headers, connect_timeout_s))

    async def request(
        self, method: str, url: str, body: bytes, headers: Mapping[str, str], connect_timeout_s: float
    ) -> UpstreamResponse:
        """As :meth:`post` with another HTTP ``method`` (``GET``, ``DELETE``: the Responses API's stored responses)."""
        return decoded(await self._request(method.encode("ascii"), url, body, headers, connect_timeout_s))

    async def probe(self, url: str, timeout_s: float) -> int:
        response: Response | None = None
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
            self.discard(conn)
        for waiter in self._slot_waiters:
            if not waiter.done():
                waiter.set_result(None)
        await asyncio.sleep(0)  # let the transports close


# Names the tests of this module reach for (kept importable from here).
_HIGH_WATER = HIGH_WATER
_Response = Response
