"""The edge: what every inference request gets, whichever door it came in by.

One :class:`Edge` (built once per app by ``create_app``) serves ``POST /v1/chat/completions``
and ``POST /v1/completions``, and every other API of ``gateway/protocol/apis.py`` (Responses,
Messages, embeddings, rerank, score; as an :class:`~gateway.protocol.apis.ApiCall`, by the ASGI
door only: the client key also from ``x-api-key`` where the API takes it there, errors in the
API's own shape), for both doors: the raw protocol door
(:class:`~gateway.api.server.InferenceCycle`, the fast path of ``kvgate serve``) and the ASGI door
(:class:`~gateway.api.openai.AsgiDoor`, taken by any other ASGI server, a URL with a query string,
or a test's ``httpx.ASGITransport``). It owns, once:

* the request id: the client's ``X-Request-Id`` when sane, else a new one
  (``api/middleware.py``), put on ``state.request_id`` and echoed as ``x-request-id``;
* authentication before the body is read (a 401 never invites a body), then the bounded body
  read: ``server.max_body_bytes``, 413 on ``Content-Length`` or on the bytes read (the door reads);
* handing over to the director, :meth:`gateway.proxy.Proxy.handle`, with the door's client-left
  watch; a client that leaves ends the request as ``cancelled`` and is answered nothing (the
  ASGI door answers 499 to nobody, as Starlette would);
* rendering: a :class:`~gateway.errors.GatewayError` as its OpenAI-shaped JSON, anything else
  logged and answered with the one internal error (:data:`INTERNAL_ERROR`), or the connection
  closed when the answer had started;
* writing the reply: a buffered answer as one write, then its accounting
  (:meth:`~gateway.proxy.BufferedReply.settle`); a stream through the door's ASGI ``send``;
* the trace and the access log, the same on every door: with tracing on the edge starts the
  request's :class:`~gateway.observability.tracing.RequestTrace` (``state.trace``) and ends it
  when the answer is complete; with ``server.access_log`` the line is written once the request is
  over (after its close-out), by :func:`gateway.closeout.access_line`.

Turning tracing or the access log on adds those effects around the same code path
(:meth:`Edge.serve`); it never sends a request to another door. A door is a small adapter
(:class:`Door`): it reads the body, watches the client and writes bytes.
"""

from __future__ import annotations

import asyncio
import logging
import time
import types
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Protocol

from opentelemetry.trace import Tracer

from gateway.api.access import PAYLOAD_LIMIT
from gateway.api.middleware import incoming_request_id, new_request_id
from gateway.closeout import access_line
from gateway.errors import AuthenticationError, GatewayError, PayloadTooLargeError
from gateway.observability.tracing import CURRENT, RequestTrace
from gateway.protocol import messages
from gateway.protocol.apis import ApiCall
from gateway.protocol.openai import Operation
from gateway.proxy import BufferedReply
from gateway.relay import ClientDisconnected

if TYPE_CHECKING:
    from gateway.app import Container

log = logging.getLogger("kvgate")

INTERNAL_ERROR = "The gateway had an internal error. It has been logged."
"""The message of every unexpected exception's answer (OpenAI ``server_error``, 500); details are logged."""

INFERENCE_PATHS = {"/v1/chat/completions": Operation.CHAT, "/v1/completions": Operation.COMPLETION}
"""The inference routes the edge serves, ahead of the app's middleware and router."""

JSON = b"application/json"
Headers = list[tuple[bytes, bytes]]


def internal_error(headers: dict[str, str] | None = None) -> GatewayError:
    """The 500 ``server_error`` answered for an unexpected exception (its text is :data:`INTERNAL_ERROR`)."""
    return GatewayError(INTERNAL_ERROR, headers=headers)


def error_headers(error: GatewayError) -> Headers:
    """``error``'s extra response headers (e.g. ``retry-after``), lower-case names, as bytes."""
    return [(name.lower().encode("latin-1"), str(value).encode("latin-1")) for name, value in error.headers.items()]


def check_body_size(declared: str | None, read: int, limit: int) -> None:
    """Raise PayloadTooLargeError (413) if ``Content-Length`` (``declared``) or the bytes ``read`` so far exceed ``limit``."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(f"Request body of {declared} bytes exceeds the limit of {limit} bytes.")
    if read > limit:
        raise PayloadTooLargeError(f"Request body exceeds the limit of {limit} bytes.")


class Door(Protocol):
    """How one door reads a request and writes its answer (one object per request).

    ``scope``: the ASGI-shaped scope (``method``, ``path``, ``headers`` as a list of byte pairs).
    ``receive``/``send``: ASGI callables, used to relay a stream. ``disconnected``: the client is
    known to have left. ``started``: an answer has begun (its status line was written).
    """

    scope: MutableMapping[str, Any]
    disconnected: bool
    started: bool

    def read_body(self, limit: int) -> Awaitable[bytes | None]:
        """The whole body, or None if the client left first. Raises PayloadTooLargeError past ``limit`` bytes."""

    def watch(self, work: Awaitable[Any]) -> Awaitable[Any]:
        """Await ``work``; the client leaving cancels it and raises ClientDisconnected."""

    def write(self, status: int, content_type: bytes, body: bytes, extra: Headers) -> Awaitable[None] | None:
        """Write a complete answer (nothing if one was started); an awaitable when the door must be awaited."""

    def left(self) -> Awaitable[None] | None:
        """The client left before an answer: end the exchange with the door (answer nobody)."""

    def close(self) -> bool:
        """An error after the answer started: close the connection. False: the door cannot; re-raise."""

    async def receive(self) -> Any: ...

    async def send(self, message: Any) -> None: ...


class _Seen:
    """What the access log of one request reads (only while the access log or tracing is on)."""

    __slots__ = ("request_body", "response_body")

    def __init__(self) -> None:
        self.request_body = b""
        self.response_body = b""

    def sender(self, send: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Awaitable[None]]:
        """``send``, noting the first :data:`PAYLOAD_LIMIT` bytes of the body it sends."""

        async def observed(message: Any) -> None:
            if message["type"] == "http.response.body" and len(self.response_body) < PAYLOAD_LIMIT:
                self.response_body += message.get("body", b"")[: PAYLOAD_LIMIT - len(self.response_body)]
            await send(message)

        return observed

    def fields(self) -> dict[str, str]:
        """The access log's ``request_body`` and ``response_body`` (text, invalid UTF-8 replaced)."""
        return {
            "request_body": self.request_body.decode("utf-8", "replace"),
            "response_body": self.response_body.decode("utf-8", "replace"),
        }


class Edge:
    """Serves inference requests for every door (see the module doc). Built once per app.

    ``container``: the app's :class:`~gateway.app.Container` (its ``settings``, ``ops.gate`` and
    ``proxy`` are read per request: a reload or the lifespan may replace them). ``tracer``: the
    OpenTelemetry tracer, or None when tracing is off. ``access_log``/``log_payloads``: the
    ``server.access_log`` and ``logging.log_payloads`` switches. ``clock``: seconds, monotonic.
    """

    __slots__ = ("_access_log", "_clock", "_container", "_observed", "_payloads", "_tracer")

    def __init__(
        self,
        container: Container,
        *,
        tracer: Tracer | None = None,
        access_log: bool = False,
        log_payloads: bool = False,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._container = container
        self._tracer = tracer
        self._access_log = access_log
        self._payloads = log_payloads and access_log
        self._observed = tracer is not None or access_log
        self._clock = clock

    def serve(self, door: Door, operation: Operation | ApiCall) -> Awaitable[None]:
        """Serve one inference request through ``door``: the awaitable that answers it (never raises
        but CancelledError; an unexpected error is logged and answered, see the module doc).

        ``operation``: chat or completions (the fast path), or another API's :class:`ApiCall`
        (``gateway/protocol/apis.py``: its client-key headers, its error shape)."""
        raw_id = incoming_request_id(door.scope["headers"]) or new_request_id()
        if self._observed:
            return self._serve_observed(door, operation, raw_id)
        return self._serve(door, operation, raw_id, types.SimpleNamespace(request_id=raw_id.decode()), None)

    async def _serve_observed(self, door: Door, operation: Operation | ApiCall, raw_id: bytes) -> None:
        """:meth:`_serve` with the request's trace around it and its access-log line after it."""
        scope = door.scope
        state = types.SimpleNamespace(request_id=raw_id.decode())
        started = self._clock()
        trace = token = None
        if self._tracer is not None:
            trace = RequestTrace(self._tracer, scope)
            trace.server.set_attribute("kvgate.request_id", state.request_id)
            state.trace = trace
            token = CURRENT.set(trace)
        seen = _Seen() if self._payloads else None
        status, error = 500, None
        try:
            status = await self._serve(door, operation, raw_id, state, seen)
        except BaseException as raised:
            error = raised
            raise
        finally:
            if trace is not None:
                trace.end(status, error if isinstance(error, Exception) else None)
                CURRENT.reset(token)  # type: ignore[arg-type]
            if self._access_log:
                extra = seen.fields() if seen is not None else None
                access_line(
                    getattr(state, "exchange", None), request_id=state.request_id, method=scope["method"],
                    path=scope["path"], status=status, duration_s=self._clock() - started, extra=extra,
                )

    async def _serve(
        self, door: Door, operation: Operation | ApiCall, raw_id: bytes, state: Any, seen: _Seen | None
    ) -> int:
        """Authenticate, read, direct, answer; the HTTP status answered (499: the client left)."""
        scope = door.scope
        container = self._container
        # the first of repeated headers wins, as with Starlette's Headers.get
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in reversed(scope["headers"])}
        try:
            try:
                key = _authenticate(container.ops.gate, operation, headers)  # 401 before reading a body
                limit = container.settings.server.max_body_bytes
                check_body_size(headers.get("content-length"), 0, limit)
                raw = await door.read_body(limit)
                if raw is None:
                    raise ClientDisconnected()  # left during the upload: nothing to answer, nothing to count
                if seen is not None:
                    seen.request_body = raw[:PAYLOAD_LIMIT]
                reply, route_headers = await container.proxy.handle(operation, headers, raw, state, door.watch, key)
            except ClientDisconnected:
                pending = door.left()
                if pending is not None:
                    await pending
                return 499
            except GatewayError as error:
                body = error.body() if type(operation) is not ApiCall else operation.api.error_body(error)
                pending = self._write(door, error.status, JSON, body, _with_id(error_headers(error), raw_id, operation), seen)
                if pending is not None:
                    await pending
                return error.status
            extra = _with_id([(name.encode("latin-1"), value.encode("latin-1")) for name, value in route_headers.items()],
                             raw_id, operation)
            if isinstance(reply, BufferedReply):
                try:
                    pending = self._write(door, reply.status, reply.content_type.encode("latin-1"), reply.body, extra, seen)
                    if pending is not None:
                        await pending
                finally:
                    _settle(reply, scope)
                return reply.status
            reply.headers.extend(extra)
            await reply(scope, door.receive, door.send if seen is None else seen.sender(door.send))
            return 200
        except BaseException as unexpected:  # noqa: BLE001  # as uvicorn's run_asgi: every error is answered or closes
            if isinstance(unexpected, asyncio.CancelledError) and door.disconnected:
                return 499
            await self._unexpected(door, unexpected, raw_id)
            return 500

    @staticmethod
    def _write(door: Door, status: int, content_type: bytes, body: bytes, extra: Headers, seen: _Seen | None) -> Awaitable[None] | None:
        """Write a complete answer through ``door`` (noting its body for the access log)."""
        if seen is not None:
            seen.response_body = body[:PAYLOAD_LIMIT]
        return door.write(status, content_type, body, extra)

    async def _unexpected(self, door: Door, error: BaseException, raw_id: bytes) -> None:
        """Log ``error``; answer the internal error, or close the connection if the answer started.

        Re-raises ``error`` when it is a CancelledError, or when the door can neither answer nor close.
        """
        log.error("unhandled error on POST %s", door.scope.get("path"), exc_info=error)
        if not door.started and not door.disconnected:
            answer = internal_error()
            pending = door.write(answer.status, JSON, answer.body(), _with_id([], raw_id))
            if pending is not None:
                await pending
        elif not door.close():
            raise error
        if isinstance(error, asyncio.CancelledError):
            raise error


def _authorization(operation: ApiCall, headers: dict[str, str]) -> str | None:
    """The ``Authorization`` value to authenticate another API's request: the header, or on an API
    that takes its key in other headers (Anthropic's ``x-api-key``) that key as a Bearer token."""
    if operation.api.client_headers:
        key = messages.client_key(headers)
        return f"Bearer {key}" if key else None
    return headers.get("authorization")


def _authenticate(gate: Any, operation: Operation | ApiCall, headers: dict[str, str]) -> Any:
    """The request's key (``gate.authenticate``); on an API that takes ``x-api-key``, a missing
    key's 401 says so (the ``anthropic`` SDK sends no ``Authorization``)."""
    if type(operation) is not ApiCall:
        return gate.authenticate(headers.get("authorization"))
    authorization = _authorization(operation, headers)
    try:
        return gate.authenticate(authorization)
    except AuthenticationError as error:
        if authorization is not None or not operation.api.client_headers:
            raise
        raise AuthenticationError(
            "You didn't provide an API key. Send it in the x-api-key header (as the anthropic SDK does) "
            "or as Authorization: Bearer YOUR_KEY.", headers=error.headers,
        ) from None


def _with_id(headers: Headers, raw_id: bytes, operation: Operation | ApiCall | None = None) -> Headers:
    """``headers`` with ``x-request-id: raw_id`` appended (in place); on an API that takes Anthropic's
    headers (``/v1/messages*``) also ``request-id``, where Anthropic's SDK reads a request's id."""
    headers.append((b"x-request-id", raw_id))
    if type(operation) is ApiCall and operation.api.client_headers:
        headers.append((b"request-id", raw_id))
    return headers


def _settle(reply: BufferedReply, scope: MutableMapping[str, Any]) -> None:
    """The reply's accounting, once its answer is on its way; a fault is logged, the answer stands."""
    try:
        reply.settle()
    except Exception:  # the answer was sent whole: keep the connection, log the fault
        log.exception("accounting failed after answering POST %s", scope.get("path"))
