"""The OpenAI-compatible edge: ``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``.

Handlers stay thin: authenticate, read the body once (bounded by ``server.max_body_bytes``),
validate the fields kvgate reads, select the route (``gateway/selection/selector.py``: model or
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

from collections.abc import Awaitable
from typing import Any

from fastapi import Request, Response
from starlette.requests import ClientDisconnect
from starlette.routing import Route

from gateway.errors import PayloadTooLargeError
from gateway.protocol.openai import Operation
from gateway.proxy import BufferedReply
from gateway.relay import ClientDisconnected, StreamRelay, race_disconnect


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
        reply, route_headers = await container.proxy.handle(operation, request.headers, raw, request.state, watch, key)
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
