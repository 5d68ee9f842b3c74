"""uvicorn's httptools protocol, with inference requests served without ASGI: the raw door.

``bench/overhead`` under py-spy (c=32, one core) showed uvicorn's ASGI ``send`` at 7 % of the
gateway's CPU (a regular-expression check per response header), and the race between the
forwarding task and a ``receive()`` watcher task (``race_disconnect``) as another fixed cost per
request. :class:`KvgateHttpProtocol` is uvicorn's own ``HttpToolsProtocol`` (connection handling,
keep-alive, pipelining, flow control, graceful shutdown and ``Expect: 100-continue`` unchanged);
for ``POST /v1/chat/completions`` and ``POST /v1/completions`` it builds an
:class:`InferenceCycle` instead of calling the ASGI app. The cycle is the raw door of the edge
(:class:`~gateway.api.edge.Door`): :meth:`gateway.api.edge.Edge.serve` does what every door
does (request id, body limit, director, errors, trace, access log); the cycle

* reads the body from the connection (``100 Continue`` when the client waits for it);
* watches for the client leaving through the connection itself: the protocol's
  ``connection_lost`` cancels the forwarding step (the endpoint sees a disconnect and stops
  generating) and the exchange ends as ``cancelled``, as the ASGI door's ``race_disconnect`` does;
* writes a complete answer (or an OpenAI-shaped error) as one buffer with precomputed bytes, and
  closes the connection after an answer given before the body was read (a lingering close,
  ``api/http_limits.py``: the client may still be sending the body);
* streams through uvicorn's own ASGI ``send``/``receive`` (``StreamRelay`` is an ASGI response).

Every other request goes to the ASGI app unchanged. Tracing and the access log do not change the
door: the edge does both on every door.

The protocol is bounded by ``[server]``'s header, timeout and keep-alive limits
(:class:`~gateway.api.http_limits.LimitedHttpProtocol`), whichever door a request takes.

Built on uvicorn internals (``HttpToolsProtocol``, ``RequestResponseCycle``; uvicorn is pinned
below 1.0 in ``pyproject.toml``); :func:`uvicorn_config` falls back to uvicorn's own protocol if
they ever change shape, and ``tests/integration`` runs every test through this protocol.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, RequestResponseCycle

from gateway.api.edge import INFERENCE_PATHS, Edge, check_body_size
from gateway.api.http_limits import LimitedHttpProtocol
from gateway.api.openai import GatewayApp
from gateway.protocol.openai import Operation
from gateway.relay import ClientDisconnected

BODY_HIGH_WATER = 256 * 1024
"""Bytes of an inference body buffered before reading pauses (uvicorn pauses at 64 KiB, for an ASGI
app that reads its body in parts). The raw door reads the whole body before it does anything with
it, so for a prompt up to the bytes the prefix key hashes (256 KiB) a pause only adds a pause, a
resume and a wake (two ``epoll_ctl`` for a 200 KB prompt). Past the mark every read pauses again,
so a larger body is read one read (uvloop's 250 KB buffer) per loop turn as before, and one turn
takes about 500 KB at most from each connection however many large bodies arrive at once. The
body limit (``check_body_size``) is checked at each wake, so a body over it is refused at most
this much (plus one read) past the limit."""
_RAW_URLS = {path.encode(): operation for path, operation in INFERENCE_PATHS.items()}  # the raw URL, as httptools gives it


class InferenceCycle(RequestResponseCycle):
    """One inference request on a :class:`KvgateHttpProtocol` connection: the edge's raw door (module doc)."""

    edge: Edge
    operation: Operation
    task: asyncio.Task[None] | None = None
    _watching = False
    chunks: list[bytes]  # the body's reads so far (the protocol's on_body appends; uvicorn's bytearray stays empty)
    buffered = 0  # their bytes

    async def run_asgi(self, app: Any) -> None:  # the name uvicorn calls; ``app`` is not used
        try:
            await self._serve()  # the edge answers every error itself; only a CancelledError comes out
        finally:
            self.on_response = lambda: None

    def _serve(self) -> Awaitable[None]:
        return self.edge.serve(self, self.operation)

    @property
    def started(self) -> bool:
        """An answer has begun on this request (the edge's Door)."""
        return self.response_started

    def client_left(self) -> None:
        """Called by the protocol when the connection is lost before the answer was complete."""
        if self._watching and self.task is not None:
            self.task.cancel()

    async def watch(self, work: Any) -> Any:
        """Await ``work``; the client leaving cancels it and raises :class:`ClientDisconnected`."""
        if self.disconnected:
            work.close()
            raise ClientDisconnected()
        self._watching = True
        try:
            return await work
        except asyncio.CancelledError:
            task = self.task
            if self.disconnected and task is not None and task.cancelling() == 1:
                task.uncancel()
                raise ClientDisconnected() from None
            raise
        finally:
            self._watching = False

    async def read_body(self, limit: int) -> bytes | None:
        """The whole request body, or None when the client left first. Raises PayloadTooLargeError.

        The protocol appends each read to :attr:`chunks` (no intermediate buffer: one join here is the
        body's only copy) and pauses reading only past :data:`BODY_HIGH_WATER` buffered bytes."""
        while True:
            if self.buffered:
                check_body_size(None, self.buffered, limit)
            if self.disconnected:
                return None
            if not self.more_body:
                break
            if self.waiting_for_100_continue and not self.transport.is_closing():
                self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                self.waiting_for_100_continue = False
            self.flow.resume_reading()
            await self.message_event.wait()
            self.message_event.clear()
        chunks, self.chunks = self.chunks, []  # the joined body is the one reference kept
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def left(self) -> None:
        """The client left before an answer: nothing to write on this connection."""

    def close(self) -> bool:
        """An error after the answer started: close the connection."""
        self.transport.close()
        return True

    def write(self, status: int, content_type: bytes, body: bytes, extra: list[tuple[bytes, bytes]]) -> None:
        """Write a complete answer as one buffer and end the cycle as uvicorn's ``send`` would."""
        if self.disconnected or self.response_started:
            return
        self.response_started = True
        self.waiting_for_100_continue = False
        if self.more_body:  # answered before the body was read: the rest would be taken for the next request
            self.keep_alive = False
        content = [STATUS_LINE[status]]
        for name, value in self.default_headers:
            content += (name, b": ", value, b"\r\n")
        content += (b"content-type: ", content_type, b"\r\ncontent-length: ", str(len(body)).encode(), b"\r\n")
        for name, value in extra:
            content += (name, b": ", value, b"\r\n")
        if not self.keep_alive:
            content.append(b"connection: close\r\n")
        content += (b"\r\n", body)
        self.transport.write(b"".join(content))
        self.response_complete = True
        self.message_event.set()
        if not self.keep_alive and not self.more_body:  # else the protocol's lingering close, in on_response
            self.transport.close()
        self.on_response()


class KvgateHttpProtocol(LimitedHttpProtocol):
    """uvicorn's httptools protocol with inference served by :class:`InferenceCycle` (module doc)."""

    def on_headers_complete(self) -> None:
        self.check_head()  # the [server] header limits (api/http_limits.py)
        gateway = self.config.app
        operation = _RAW_URLS.get(self.url) if isinstance(gateway, GatewayApp) else None
        if (
            operation is None
            or self.parser.get_method() != b"POST"
            or self.parser.should_upgrade()
            or (self.limit_concurrency is not None and len(self.tasks) >= self.limit_concurrency)
            or (gateway.cors is not None and any(name == b"origin" for name, _ in self.headers))  # api/cors.py
        ):
            super().on_headers_complete()
            return
        http_version = self.parser.get_http_version()
        scope = self.scope
        scope["method"] = "POST"
        if http_version != "1.1":
            scope["http_version"] = http_version
        scope["path"] = self.url.decode("ascii")
        scope["raw_path"] = self.url
        scope["query_string"] = b""
        existing = self.cycle
        cycle = InferenceCycle(
            scope=scope,
            transport=self.transport,
            flow=self.flow,
            logger=self.logger,
            access_logger=self.access_logger,
            access_log=self.access_log,
            default_headers=self.server_state.default_headers,
            message_event=asyncio.Event(),
            expect_100_continue=self.expect_100_continue,
            keep_alive=http_version != "1.0" and self.parser.should_keep_alive(),
            on_response=self.on_response_complete,
        )
        cycle.edge = gateway.edge
        cycle.operation = operation
        cycle.chunks = []
        self.cycle = cycle
        if existing is None or existing.response_complete:
            self._start_asgi_task(cycle, self.app)
        else:  # pipelined: queued as uvicorn queues its own cycles
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, self.app))

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if type(cycle) is not InferenceCycle:
            super().on_body(body)
            return
        if cycle.response_complete:  # answered before its body was read (uvicorn drops the rest too)
            return
        cycle.chunks.append(body)
        cycle.buffered += len(body)
        if cycle.buffered > BODY_HIGH_WATER:
            self.flow.pause_reading()
        cycle.message_event.set()

    def _buffered(self, cycle: RequestResponseCycle) -> int:
        return cycle.buffered if type(cycle) is InferenceCycle else super()._buffered(cycle)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        if not isinstance(cycle, InferenceCycle):
            super()._start_asgi_task(cycle, app)
            return
        task = self.loop.create_task(cycle.run_asgi(app))
        task.add_done_callback(self.tasks.discard)
        self.tasks.add(task)
        cycle.task = task

    def connection_lost(self, exc: Exception | None) -> None:
        cycle = self.cycle
        super().connection_lost(exc)
        if isinstance(cycle, InferenceCycle) and cycle.disconnected:
            cycle.client_left()


def uvicorn_config(app: Any, *, raw_door: bool = True, **kwargs: Any) -> uvicorn.Config:
    """``uvicorn.Config(app, **kwargs)`` serving HTTP with :class:`KvgateHttpProtocol`.

    ``raw_door=False``: uvicorn's httptools protocol with the same ``[server]`` limits
    (:class:`~gateway.api.http_limits.LimitedHttpProtocol`) but no raw door, so inference comes in
    by the ASGI door (tests and benchmarks compare the doors with it; both call the same edge).
    The idle keep-alive limit is ``server.keepalive_s`` of ``app``'s settings (uvicorn's
    ``timeout_keep_alive``) unless ``kwargs`` sets it; the other limits are read by the protocol
    (``api/http_limits.py``).
    """
    try:
        kwargs.setdefault("timeout_keep_alive", app.state.container.settings.server.keepalive_s)
    except AttributeError:
        pass
    return uvicorn.Config(app, http=KvgateHttpProtocol if raw_door else LimitedHttpProtocol, **kwargs)
