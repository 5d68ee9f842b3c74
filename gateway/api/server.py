"""uvicorn's httptools protocol, with inference requests served without ASGI.

``bench/overhead`` under py-spy (c=32, one core) showed uvicorn's ASGI ``send`` at 7 % of the
gateway's CPU (a regular-expression check per response header), and the race between the
forwarding task and a ``receive()`` watcher task (``race_disconnect``) as another fixed cost per
request. :class:`KvgateHttpProtocol` is uvicorn's own ``HttpToolsProtocol`` (connection handling,
keep-alive, pipelining, flow control, graceful shutdown and ``Expect: 100-continue`` unchanged);
for ``POST /v1/chat/completions`` and ``POST /v1/completions`` it builds an
:class:`InferenceCycle` instead of calling the ASGI app, which

* reads the body (``server.max_body_bytes``; 413 beyond it) and calls
  :meth:`~gateway.proxy.Proxy.handle` directly, with the headers as a dict;
* watches for the client leaving through the connection itself: the protocol's
  ``connection_lost`` cancels the forwarding step (the endpoint sees a disconnect and stops
  generating) and the exchange ends as ``cancelled``, as the ASGI path's ``race_disconnect`` does;
* writes a complete answer (or an OpenAI-shaped error) as one buffer with precomputed bytes;
* streams through uvicorn's own ASGI ``send``/``receive`` (``StreamRelay`` is an ASGI response).

Every other request, and every request while tracing or the access log is on (their middleware
must see inference too; ``GatewayApp.fast_path`` is then False), goes to the ASGI app unchanged.
The same semantics as the ASGI fast path in ``api/fastpath.py``: ``x-request-id`` in and out,
``x-kvgate-*`` headers, a :class:`~gateway.errors.GatewayError` as its OpenAI-shaped response, any
other exception logged and answered with an OpenAI-shaped 500 (or the connection closed when the
answer had started).

The protocol is bounded by ``[server]``'s header, timeout and keep-alive limits
(:class:`~gateway.api.http_limits.LimitedHttpProtocol`), whichever door a request takes.

Built on uvicorn internals (``HttpToolsProtocol``, ``RequestResponseCycle``; uvicorn is pinned
below 1.0 in ``pyproject.toml``); :func:`uvicorn_config` falls back to uvicorn's own protocol if
they ever change shape, and ``tests/integration`` runs every test through this protocol.
"""

from __future__ import annotations

import asyncio
import logging
import types
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, RequestResponseCycle

from gateway.api.fastpath import FAST_PATHS, GatewayApp
from gateway.api.http_limits import LimitedHttpProtocol
from gateway.api.middleware import incoming_request_id, new_request_id
from gateway.api.openai import check_body_size
from gateway.errors import GatewayError
from gateway.protocol.openai import Operation
from gateway.proxy import BufferedReply
from gateway.relay import ClientDisconnected

log = logging.getLogger("kvgate")

_FAST_URLS = {path.encode(): operation for path, operation in FAST_PATHS.items()}  # the raw URL, as httptools gives it
_INTERNAL = "The gateway had an internal error. It has been logged."


class InferenceCycle(RequestResponseCycle):
    """One inference request on a :class:`KvgateHttpProtocol` connection (see the module doc)."""

    gateway: GatewayApp
    operation: Operation
    task: asyncio.Task[None] | None = None
    _watching = False
    _request_id: bytes | None = None  # set once the request's id is known; echoed on every answer

    async def run_asgi(self, app: Any) -> None:  # the name uvicorn calls; ``app`` is not used
        try:
            await self._serve()
        except BaseException as exc:  # as uvicorn's run_asgi: log, answer 500 or close
            if isinstance(exc, asyncio.CancelledError) and self.disconnected:
                return
            log.error("unhandled error on POST %s", self.scope.get("path"), exc_info=exc)
            if not self.response_started and not self.disconnected:
                self._write_error(GatewayError(_INTERNAL))
            else:
                self.transport.close()
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self.on_response = lambda: None

    def client_left(self) -> None:
        """Called by the protocol when the connection is lost before the answer was complete."""
        if self._watching and self.task is not None:
            self.task.cancel()

    async def _watch(self, work: Any) -> Any:
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

    async def _body(self, limit: int) -> bytes | None:
        """The whole request body, or None when the client left first. Raises PayloadTooLargeError."""
        chunks: list[bytes] = []
        size = 0
        while True:
            if self.body:
                size += len(self.body)
                check_body_size(None, size, limit)
                chunks.append(bytes(self.body))
                self.body = bytearray()
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
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _serve(self) -> None:
        scope = self.scope
        container = self.gateway.state.container
        raw_id = incoming_request_id(scope["headers"]) or new_request_id()
        self._request_id = raw_id
        # the first of repeated headers wins, as with Starlette's Headers.get on the ASGI path
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in reversed(scope["headers"])}
        try:
            key = container.ops.gate.authenticate(headers.get("authorization"))
            limit = container.settings.server.max_body_bytes
            check_body_size(headers.get("content-length"), 0, limit)
            raw = await self._body(limit)
            if raw is None:
                return  # left during the upload: nothing to answer, nothing to count
            state = types.SimpleNamespace(request_id=raw_id.decode())
            reply, route_headers = await container.proxy.handle(self.operation, headers, raw, state, self._watch, key)
        except ClientDisconnected:
            return
        except GatewayError as error:
            self._write_error(error)
            return
        extra = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in route_headers.items()]
        extra.append((b"x-request-id", raw_id))
        if isinstance(reply, BufferedReply):
            try:
                self._write(reply.status, reply.content_type.encode("latin-1"), reply.body, extra)
            finally:
                try:
                    reply.settle()  # the accounting, once the answer is on its way
                except Exception:  # the answer was sent whole: keep the connection, log the fault
                    log.exception("accounting failed after answering POST %s", scope.get("path"))
            return
        reply.headers.extend(extra)
        await reply(scope, self.receive, self.send)

    def _write_error(self, error: GatewayError) -> None:
        extra = [(name.lower().encode("latin-1"), str(value).encode("latin-1")) for name, value in error.headers.items()]
        if self._request_id is not None:
            extra.append((b"x-request-id", self._request_id))
        self._write(error.status, b"application/json", error.body(), extra)

    def _write(self, status: int, content_type: bytes, body: bytes, extra: list[tuple[bytes, bytes]]) -> None:
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
        if not self.keep_alive:
            self.transport.close()
        self.on_response()


class KvgateHttpProtocol(LimitedHttpProtocol):
    """uvicorn's httptools protocol with inference served by :class:`InferenceCycle` (module doc)."""

    def on_headers_complete(self) -> None:
        self.check_head()  # the [server] header limits (api/http_limits.py)
        gateway = self.config.app
        operation = _FAST_URLS.get(self.url) if isinstance(gateway, GatewayApp) and gateway.fast_path else None
        if (
            operation is None
            or self.parser.get_method() != b"POST"
            or self.parser.should_upgrade()
            or (self.limit_concurrency is not None and len(self.tasks) >= self.limit_concurrency)
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
        cycle.gateway = gateway
        cycle.operation = operation
        self.cycle = cycle
        if existing is None or existing.response_complete:
            self._start_asgi_task(cycle, self.app)
        else:  # pipelined: queued as uvicorn queues its own cycles
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, self.app))

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


def uvicorn_config(app: Any, **kwargs: Any) -> uvicorn.Config:
    """``uvicorn.Config(app, **kwargs)`` serving HTTP with :class:`KvgateHttpProtocol`.

    The idle keep-alive limit is ``server.keepalive_s`` of ``app``'s settings (uvicorn's
    ``timeout_keep_alive``) unless ``kwargs`` sets it; the other limits are read by the protocol
    (``api/http_limits.py``).
    """
    try:
        kwargs.setdefault("timeout_keep_alive", app.state.container.settings.server.keepalive_s)
    except AttributeError:
        pass
    return uvicorn.Config(app, http=KvgateHttpProtocol, **kwargs)
