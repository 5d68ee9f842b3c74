"""The OpenAI-compatible edge: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``.

Handlers stay thin: authenticate, read the body once (bounded by ``server.max_body_bytes``),
validate the fields kvgate reads, select the route (``gateway/routes/selector.py``: model or
alias, limit headers, context fit) and apply ``X-Failover-Route``, admit the key (model list
checked on the clusters of that final route, quotas with a reservation of the estimated tokens
and cost, ``gateway/keys/gate.py``; after the route resolved, so an unknown model costs no
quota), hand over to the proxy, and turn
its reply into a response with the ``x-kvgate-route`` (route and reason), ``x-kvgate-cluster`` and
``x-kvgate-endpoint`` headers. A client that disconnects at any point cancels the upstream
request. Errors raise :class:`~gateway.errors.GatewayError`, which the app's exception handler
renders.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import Request, Response
from starlette.requests import ClientDisconnect
from starlette.routing import Route

from gateway.errors import GatewayError, PayloadTooLargeError, UnsupportedMediaTypeError
from gateway.exchange import CANCELLED, CLIENT_ERROR, UPSTREAM_ERROR
from gateway.protocol.openai import Operation, parse_request
from gateway.proxy import BufferedReply
from gateway.upstream.streaming import ClientDisconnected, StreamRelay, race_disconnect


def check_body_size(declared: str | None, read: int, limit: int) -> None:
    """Raise PayloadTooLargeError (413) if ``Content-Length`` (``declared``) or the bytes ``read`` so far exceed ``limit``."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(f"Request body of {declared} bytes exceeds the limit of {limit} bytes.")
    if read > limit:
        raise PayloadTooLargeError(f"Request body exceeds the limit of {limit} bytes.")


async def read_body(request: Request, limit: int) -> bytes:
    """The whole request body.

    Raises:
        PayloadTooLargeError: (413) ``Content-Length`` or the bytes read exceed ``limit`` bytes.
    """
    check_body_size(request.headers.get("content-length"), 0, limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            check_body_size(None, size, limit)
            chunks.append(chunk)
    except ClientDisconnect:
        raise ClientDisconnected() from None
    return b"".join(chunks)


def check_content_type(value: str | None) -> None:
    """Raise UnsupportedMediaTypeError (415) unless ``value`` is ``application/json``, parameters allowed.

    ``value``: the request's ``Content-Type`` header, or None when absent. An absent header is
    accepted (the body is then parsed as JSON, as FastAPI and vLLM do); any other media type
    (``text/plain``, ``application/x-www-form-urlencoded``, ...) is refused before it is parsed.
    """
    if value is None:
        return
    media_type = value.split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        shown = media_type[:64] or "(empty)"
        raise UnsupportedMediaTypeError(
            f"Content-Type must be application/json, got {shown!r}.", param="Content-Type"
        )


Watch = Callable[[Awaitable[Any]], Awaitable[Any]]
"""Awaits the forwarding step, raising :class:`ClientDisconnected` (and cancelling it) if the client leaves."""


async def handle_inference(
    container: Any,
    operation: Operation,
    headers: Mapping[str, str],
    raw: bytes,
    state: Any,
    watch: Watch,
    key: Any = None,
) -> tuple[BufferedReply | StreamRelay, dict[str, str]]:
    """Serve one inference request whose body ``raw`` was read; server-agnostic.

    Used by the ASGI handler below and by the HTTP protocol's fast path (``gateway/api/server.py``).
    ``headers``: lowercase names. ``state``: the request's state, with its ``request_id`` (the
    exchange and the trace are put on it). ``key``: the client's key when the caller authenticated already.
    Returns the reply and the ``x-kvgate-*`` headers to add; the caller calls a
    :class:`BufferedReply`'s ``settle()`` once it has written it.

    Raises:
        GatewayError: the OpenAI-shaped error to answer with (the exchange is finished).
        ClientDisconnected: the client left while the request was forwarded (finished as cancelled).
    """
    gate = container.ops.gate
    if key is None:
        key = gate.authenticate(headers.get("authorization"))
    check_content_type(headers.get("content-type"))
    parsed = parse_request(operation, raw)
    routed = await container.selector.select(parsed, key, headers)
    route = container.proxy.route_for(parsed, headers.get("x-failover-route"), routed.route)
    admission = await gate.admit(
        key, parsed.model, len(raw), route.clusters, lambda: container.selector.reservation(routed, route, len(raw))
    )
    exchange = container.ops.exchange(state.request_id, parsed.model, container.clock, admission, state)
    container.selector.attach(exchange, routed)
    try:
        reply = await watch(container.proxy.forward(routed.request, exchange, route))
    except ClientDisconnected:
        exchange.finish(CANCELLED)
        raise
    except GatewayError as error:
        exchange.error_type, exchange.status = error.code or str(error.status), error.status
        exchange.finish(CLIENT_ERROR if error.status < 500 else UPSTREAM_ERROR)
        raise
    route_headers = {
        "x-kvgate-route": f"{route.name}; reason={route.reason}",
        "x-kvgate-cluster": exchange.cluster,
        "x-kvgate-endpoint": exchange.endpoint,
    }
    return reply, route_headers


async def inference(request: Request, operation: Operation) -> Response:
    """Serve one inference request through ASGI (the fast path in ``api/fastpath.py`` and the routes below)."""
    container = request.app.state.container
    key = container.ops.gate.authenticate(request.headers.get("authorization"))  # 401 before reading a body
    try:
        raw = await read_body(request, container.settings.server.max_body_bytes)
    except ClientDisconnected:  # left during the upload: nothing to answer, nothing to count
        return Response(status_code=499)

    def watch(work: Awaitable[Any]) -> Awaitable[Any]:
        return race_disconnect(work, request.receive)

    try:
        reply, route_headers = await handle_inference(
            container, operation, request.headers, raw, request.state, watch, key
        )
    except ClientDisconnected:
        return Response(status_code=499)
    if isinstance(reply, BufferedReply):
        reply.settle()  # before the answer here: Starlette gives no hook right after writing it
        return Response(reply.body, reply.status, route_headers, media_type=reply.content_type)
    reply.headers.extend((name.encode(), value.encode()) for name, value in route_headers.items())
    return reply  # type: ignore[return-value]  # an ASGI response; Starlette awaits it


async def chat_completions(request: Request) -> Response:
    return await inference(request, Operation.CHAT)


async def completions(request: Request) -> Response:
    return await inference(request, Operation.COMPLETION)


async def list_models(request: Request) -> Response:
    container = request.app.state.container
    key = container.ops.gate.authenticate(request.headers.get("authorization"))
    created = container.started_at
    data = [
        {"id": entry.id, "object": "model", "created": created, "owned_by": "kvgate"}
        for entry in container.catalog.entries()
        if key.limits.allows(entry.id)
    ]
    return container.json({"object": "list", "data": data})


routes = [
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/v1/models", list_models, methods=["GET"]),
]
