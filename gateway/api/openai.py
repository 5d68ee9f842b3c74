"""The OpenAI-compatible edge: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``.

Handlers stay thin: authenticate, read the body once (bounded by ``server.max_body_bytes``),
validate the fields kvgate reads, select the route (``gateway/routes/selector.py``: model or
alias, limit headers, context fit), admit the key (model list and quotas, ``gateway/keys/gate.py``;
after the route resolved, so an unknown model costs no quota), hand over to the proxy, and turn
its reply into a response with the ``x-kvgate-route`` (route and reason), ``x-kvgate-cluster`` and
``x-kvgate-endpoint`` headers. A client that disconnects at any point cancels the upstream
request. Errors raise :class:`~gateway.errors.GatewayError`, which the app's exception handler
renders.
"""

from __future__ import annotations

from fastapi import Request, Response
from starlette.requests import ClientDisconnect
from starlette.routing import Route

from gateway.errors import GatewayError, PayloadTooLargeError
from gateway.exchange import CANCELLED, CLIENT_ERROR, UPSTREAM_ERROR
from gateway.protocol.openai import Operation, parse_request
from gateway.proxy import BufferedReply
from gateway.upstream.streaming import ClientDisconnected, race_disconnect


async def read_body(request: Request, limit: int) -> bytes:
    """The whole request body.

    Raises:
        PayloadTooLargeError: (413) ``Content-Length`` or the bytes read exceed ``limit`` bytes.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLargeError(f"Request body of {declared} bytes exceeds the limit of {limit} bytes.")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLargeError(f"Request body exceeds the limit of {limit} bytes.")
            chunks.append(chunk)
    except ClientDisconnect:
        raise ClientDisconnected() from None
    return b"".join(chunks)


async def inference(request: Request, operation: Operation) -> Response:
    """Serve one inference request (called by the fast path and by the routes below)."""
    container = request.app.state.container
    gate = container.ops.gate
    key = gate.authenticate(request.headers.get("authorization"))
    try:
        raw = await read_body(request, container.settings.server.max_body_bytes)
    except ClientDisconnected:  # left during the upload: nothing to answer, nothing to count
        return Response(status_code=499)
    parsed = parse_request(operation, raw)
    routed = await container.selector.select(parsed, key, request.headers)
    route = container.proxy.route_for(parsed, request.headers.get("x-failover-route"), routed.route)
    admission = await gate.admit(key, parsed.model, len(raw))
    exchange = container.ops.exchange(request.state.request_id, parsed.model, container.clock, admission, request.state)
    container.selector.attach(exchange, routed)
    try:
        reply = await race_disconnect(container.proxy.forward(routed.request, exchange, route), request.receive)
    except ClientDisconnected:
        exchange.finish(CANCELLED)
        return Response(status_code=499)
    except GatewayError as error:
        exchange.error_type = error.code or str(error.status)
        exchange.finish(CLIENT_ERROR if error.status < 500 else UPSTREAM_ERROR)
        raise
    route_headers = {
        "x-kvgate-route": f"{route.name}; reason={route.reason}",
        "x-kvgate-cluster": exchange.cluster,
        "x-kvgate-endpoint": exchange.endpoint,
    }
    if isinstance(reply, BufferedReply):
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
