"""The upstream HTTP client: one pooled aiohttp session behind the :class:`Upstream` seam.

Chosen by measurement (``bench/upstream_client.py``): a FastAPI proxy spends several times more
CPU per request with httpx's ``AsyncClient`` than with aiohttp's client. Connections are pooled
and kept alive (``upstream.pool_size``, ``upstream.keepalive_s``); aiohttp sets TCP_NODELAY on
every connection it opens (``aiohttp.base_protocol``), so small SSE writes are not delayed by
Nagle's algorithm.

Redirects are never followed (``allow_redirects=False``: an endpoint must not send a client's
prompt elsewhere); with a :class:`~gateway.endpoints.allowlist.ConnectGuard` an admin-added
endpoint's host resolves only to addresses inside ``admin.allowed_networks``.

aiohttp's exceptions are translated here, and only here, into the gateway's error tree:
connection refused, reset or closed early -> :class:`~gateway.errors.UpstreamError` (502);
timeouts -> :class:`~gateway.errors.UpstreamTimeoutError` (504).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Mapping
from typing import Protocol

import aiohttp

from gateway.endpoints.allowlist import ConnectGuard, GuardedResolver
from gateway.errors import UpstreamError, UpstreamTimeoutError
from gateway.config import UpstreamSettings
from gateway.upstream.decoding import decoded


class UpstreamResponse(Protocol):
    """An open upstream response: status and headers known, body not yet read."""

    status: int
    headers: Mapping[str, str]

    async def read(self) -> bytes:
        """The whole body. Raises UpstreamError / UpstreamTimeoutError."""

    async def next_chunk(self) -> bytes:
        """The next bytes as they arrive (any size), ``b""`` at the end of the body."""

    def close(self) -> None:
        """Abort: drop the connection (the endpoint sees a disconnect and stops generating)."""

    def release(self) -> None:
        """Finished normally: return the connection to the pool."""


class Upstream(Protocol):
    """Sends requests to endpoints."""

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], connect_timeout_s: float) -> UpstreamResponse:
        """POST and wait for the response headers. Raises UpstreamError / UpstreamTimeoutError.

        Only the TCP connect is bounded here (``connect_timeout_s``); the caller bounds the
        time to the first byte, the silences between chunks and the total.
        """

    async def probe(self, url: str, timeout_s: float) -> int:
        """GET ``url``; its status. Raises UpstreamError / UpstreamTimeoutError."""

    async def aclose(self) -> None: ...


def os_error_detail(error: OSError) -> str:
    """A connect failure's reason for a client's message, never the address: the resolver's own
    words for a name that did not resolve (``socket.gaierror``: its errno is an ``EAI_*`` code,
    which ``os.strerror`` reads as "Unknown error -2"), else the errno's, else the class name."""
    if isinstance(error, socket.gaierror):
        return f"name resolution failed: {error.strerror or 'unknown error'}"
    return os.strerror(error.errno) if error.errno else type(error).__name__


def _translate(error: BaseException, url: str) -> Exception:
    """The gateway error for an aiohttp failure. Messages never name the URL (clients see them)."""
    if isinstance(error, (asyncio.TimeoutError, aiohttp.ServerTimeoutError)):
        return UpstreamTimeoutError("timed out")
    if isinstance(error, aiohttp.ClientConnectorError):
        return UpstreamError(f"connection failed ({os_error_detail(error.os_error)})")
    if isinstance(error, aiohttp.ClientPayloadError):
        return UpstreamError("connection closed before the response body was complete")
    if isinstance(error, aiohttp.ServerDisconnectedError):
        return UpstreamError("server disconnected")
    return UpstreamError(f"{type(error).__name__}")


class _AiohttpResponse:
    __slots__ = ("_response", "status", "headers", "_url", "_broken")

    def __init__(self, response: aiohttp.ClientResponse, url: str) -> None:
        self._response = response
        self.status = response.status
        self.headers = response.headers
        self._url = url
        self._broken: Exception | None = None

    async def read(self) -> bytes:
        try:
            body = await self._response.read()
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            self._response.close()
            raise _translate(error, self._url) from None
        self._response.release()
        return body

    async def next_chunk(self) -> bytes:
        if self._broken is not None:
            raise self._broken
        content = self._response.content
        try:
            return await content.readany()
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            # aiohttp raises a stored error before returning bytes it already buffered: hand those
            # out first (private API, guarded), then the error on the next call.
            rest = content._read_nowait(-1) if hasattr(content, "_read_nowait") else b""
            self._response.close()
            self._broken = _translate(error, self._url)
            if rest:
                return rest
            raise self._broken from None

    def close(self) -> None:
        self._response.close()

    def release(self) -> None:
        self._response.release()


class AiohttpUpstream:
    """The production :class:`Upstream`. Create inside a running event loop."""

    def __init__(self, settings: UpstreamSettings, guard: ConnectGuard | None = None) -> None:
        connector = aiohttp.TCPConnector(
            resolver=GuardedResolver(guard) if guard is not None else None,
            use_dns_cache=guard is None,  # guarded: each new connection resolves (and is checked) afresh
            limit=settings.pool_size,
            limit_per_host=0,
            keepalive_timeout=settings.keepalive_s or None,
            enable_cleanup_closed=False,
            force_close=settings.keepalive_s == 0,
        )
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=settings.timeouts.connect_s)
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=False,
            skip_auto_headers=("User-Agent",),
        )

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], connect_timeout_s: float) -> UpstreamResponse:
        timeout = self._timeouts.get(connect_timeout_s)
        if timeout is None:
            timeout = self._timeouts.setdefault(connect_timeout_s, aiohttp.ClientTimeout(sock_connect=connect_timeout_s))
        try:
            response = await self._session.post(url, data=body, headers=headers, timeout=timeout, allow_redirects=False)
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            raise _translate(error, url) from None
        return decoded(_AiohttpResponse(response, url))  # a compressed answer is decoded

    async def request(
        self, method: str, url: str, body: bytes, headers: Mapping[str, str], connect_timeout_s: float
    ) -> UpstreamResponse:
        """As :meth:`post` with another HTTP ``method`` (``GET``, ``DELETE``)."""
        timeout = aiohttp.ClientTimeout(sock_connect=connect_timeout_s)
        try:
            response = await self._session.request(
                method, url, data=body or None, headers=headers, timeout=timeout, allow_redirects=False
            )
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            raise _translate(error, url) from None
        return decoded(_AiohttpResponse(response, url))

    async def probe(self, url: str, timeout_s: float) -> int:
        try:
            async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s), allow_redirects=False) as response:
                await response.read()
                return response.status
        except (aiohttp.ClientError, asyncio.TimeoutError) as error:
            raise _translate(error, url) from None

    async def aclose(self) -> None:
        await self._session.close()
