"""The streaming relay: an ASGI response that passes an endpoint's SSE bytes through unchanged.

It owns the endpoint's in-flight slot from the moment the proxy hands it over, and gives it back
exactly once, however the stream ends: finished, broken upstream, or client gone.

Each upstream read is sent to the client as it came (no re-framing, no re-encoding) and fed to a
:class:`~gateway.protocol.sse.StreamObserver` that only watches (TTFT, usage, finish reasons,
``[DONE]``, in-band errors). While relaying, a second task waits for the client's
``http.disconnect``; a disconnect aborts the upstream request (the engine stops generating) and
ends the request as ``cancelled``, never as an endpoint failure.

How a stream ends, as the client sees it:
    * upstream finished with ``[DONE]``: relayed; ``success`` (or ``upstream_error`` if an
      in-band ``{"error": ...}`` event was relayed: a failure whatever the HTTP status said).
    * upstream broke or ended without ``[DONE]``: kvgate appends one OpenAI-format error event
      and closes, never a fake ``finish_reason`` or ``[DONE]``; ``upstream_error``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson
from prometheus_client import Counter, Gauge

from gateway.endpoints.model import Endpoint
from gateway.errors import GatewayError
from gateway.exchange import CANCELLED, SUCCESS, UPSTREAM_ERROR, Exchange
from gateway.protocol.sse import StreamObserver
from gateway.upstream.client import UpstreamResponse

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


async def wait_for_disconnect(receive: Receive) -> None:
    """Return when the client has disconnected (call only after the request body was read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class ClientDisconnected(Exception):
    """The client went away before the answer was ready."""


async def race_disconnect(work: Awaitable[Any], receive: Receive) -> Any:
    """Await ``work``, cancelling it if the client disconnects first.

    Raises:
        ClientDisconnected: the client left; ``work`` was cancelled.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(wait_for_disconnect(receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise ClientDisconnected()
    return task.result()


class StreamRelay:
    """ASGI response relaying an open upstream SSE stream; built by the proxy."""

    def __init__(
        self,
        *,
        first: bytes,
        response: UpstreamResponse,
        observer: StreamObserver,
        endpoint: Endpoint,
        exchange: Exchange,
        in_flight_gauge: Gauge,
        failures: Counter,
    ) -> None:
        self._first = first
        self._response = response
        self._observer = observer
        self._endpoint = endpoint
        self._exchange = exchange
        self._gauge = in_flight_gauge
        self._failures = failures
        self._released = False
        self.headers: list[tuple[bytes, bytes]] = []

    def _release(self) -> None:
        if not self._released:
            self._released = True
            self._endpoint.release()
            self._gauge.dec()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self._start_headers()})
            relay = asyncio.ensure_future(self._relay(send))
            watcher = asyncio.ensure_future(wait_for_disconnect(receive))
            try:
                await asyncio.wait((relay, watcher), return_when=asyncio.FIRST_COMPLETED)
            finally:
                watcher.cancel()
                if not relay.done():
                    relay.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await relay
                    self._cancelled()
                elif relay.exception() is not None:
                    self._cancelled()  # sending to the client failed: it is gone
        finally:
            self.abort()

    def abort(self) -> None:
        """Free everything if the relay never ran or was interrupted (idempotent)."""
        if not self._released:
            self._response.close()
            self._cancelled()
            self._release()

    def _start_headers(self) -> list[tuple[bytes, bytes]]:
        content_type = self._response.headers.get("content-type", "text/event-stream")
        return [
            (b"content-type", content_type.encode("latin-1")),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            *self.headers,
        ]

    def _cancelled(self) -> None:
        self._response.close()
        self._exchange.finish(CANCELLED)

    async def _relay(self, send: Send) -> None:
        observer = self._observer
        chunk = self._first
        error: GatewayError | None = None
        while chunk:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            try:
                chunk = await self._response.next_chunk()
            except GatewayError as failure:
                error = GatewayError(f"Upstream endpoint '{self._endpoint.name}' failed mid-stream: {failure.message}.")
                break
            observer.feed(chunk)
        if error is None and not observer.done and observer.error is None:
            error = GatewayError(f"Upstream endpoint '{self._endpoint.name}' closed the stream before it ended.")
        if error is not None:
            await send({"type": "http.response.body", "body": self._error_event(error), "more_body": False})
            self._response.close()
            self._fail("broken_stream", error.message)
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        self._response.release()
        if observer.error is not None:
            self._fail("stream_error", str(observer.error.get("message")))
            return
        self._endpoint.record_success()
        self._exchange.decision.observe(self._endpoint, observer.usage)
        self._release()
        self._exchange.finish(SUCCESS, usage=observer.usage, first_token_at=observer.first_token_at)

    def _error_event(self, error: GatewayError) -> bytes:
        payload = {"error": {"message": error.message, "type": "server_error", "param": None, "code": "upstream_error"}}
        separator = b"\n\n" if self._observer.has_partial_event else b""
        return separator + b"data: " + orjson.dumps(payload) + b"\n\n"

    def _fail(self, reason: str, message: str) -> None:
        self._endpoint.record_failure(f"{reason}: {message}")
        self._failures.labels(self._endpoint.name, reason).inc()
        self._release()
        self._exchange.finish(UPSTREAM_ERROR, usage=self._observer.usage)
