"""The OpenAI-compatible API on ASGI: the app class, the edge's ASGI door, and ``/v1/models``.

:class:`GatewayApp` is FastAPI with ``POST /v1/chat/completions`` and ``POST /v1/completions``
always handed to the edge (:meth:`gateway.api.edge.Edge.serve`) before the middleware stack and
the router, through :class:`AsgiDoor`; whether tracing or the access log is on does not matter
(the edge does both). Profiling (``bench/overhead``, py-spy) had shown a fixed cost per request
in the generic layers (Starlette's error middleware, FastAPI's wrappers, the request-id
middleware, pattern matching over every admin route). The raw protocol door
(``api/server.py``) serves the same two routes without ASGI; every other route (admin, health,
metrics, ``/v1/models``) goes through FastAPI.

The other APIs of ``gateway/protocol/apis.py`` (Responses, Messages, embeddings, rerank, score)
are handed to the edge the same way, as an :class:`~gateway.protocol.apis.ApiCall`: always by this
door (the raw door serves chat and completions only), looked up in the table once per request.

The two inference routes stay in :data:`routes` for the router's 405 on other methods and for
the OpenAPI document; their POST never reaches the router.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from fastapi import FastAPI, Request, Response
from starlette.routing import Route

from gateway.api.edge import INFERENCE_PATHS, Edge, check_body_size
from gateway.errors import ModelNotFoundError
from gateway.protocol.apis import ApiCall, call_for
from gateway.protocol.openai import Operation
from gateway.relay import race_disconnect

_API_PREFIXES = ("/v1/responses", "/v1/messages", "/v1/embeddings", "/v1/rerank", "/v1/score")
"""The paths of the other APIs (``gateway/protocol/apis.py``): looked up in the table, by the edge."""


class AsgiDoor:
    """The edge's door for one ASGI request (``scope``, ``receive``, ``send``): see :class:`~gateway.api.edge.Door`."""

    __slots__ = ("_send", "disconnected", "receive", "scope", "started")

    def __init__(self, scope: Any, receive: Any, send: Any) -> None:
        self.scope = scope
        self.receive = receive
        self._send = send
        self.started = False
        self.disconnected = False

    async def read_body(self, limit: int) -> bytes | None:
        """The whole body, or None if the client left first. Raises PayloadTooLargeError past ``limit``."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            check_body_size(None, size, limit)
            chunks.append(chunk)
            if not message.get("more_body", False):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def watch(self, work: Awaitable[Any]) -> Awaitable[Any]:
        """Await ``work``, racing ``receive()`` for the client's disconnect (raises ClientDisconnected)."""
        return race_disconnect(work, self.receive)

    async def write(self, status: int, content_type: bytes, body: bytes, extra: list[tuple[bytes, bytes]]) -> None:
        """Send a complete answer (nothing if one was started)."""
        if self.started:
            return
        headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode()), *extra]
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self._send({"type": "http.response.body", "body": body})

    async def left(self) -> None:
        """The client left: end the ASGI exchange with an empty 499 (sent to nobody)."""
        if not self.started:
            await self.send({"type": "http.response.start", "status": 499, "headers": [(b"content-length", b"0")]})
            await self._send({"type": "http.response.body", "body": b""})

    def close(self) -> bool:
        """ASGI cannot close the connection: False (the edge re-raises; the server closes it)."""
        return False

    async def send(self, message: Any) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


class GatewayApp(FastAPI):
    """FastAPI, with inference requests handed to the edge before the middleware stack (module doc).

    ``edge``: the app's :class:`~gateway.api.edge.Edge`, set by ``create_app``.
    """

    edge: Edge
    cors: Any = None  # gateway.api.cors.Cors around :meth:`dispatch` when [server] cors_allow_origins is set

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.cors is not None:
            await self.cors(scope, receive, send)
        else:
            await self.dispatch(scope, receive, send)

    async def dispatch(self, scope: Any, receive: Any, send: Any) -> None:
        """Inference to the edge, anything else to FastAPI's stack."""
        if scope["type"] == "http":
            operation: Operation | ApiCall | None = INFERENCE_PATHS.get(scope["path"]) if scope["method"] == "POST" else None
            if operation is None and scope["path"].startswith(_API_PREFIXES):  # another API of the table
                operation = call_for(scope["method"], scope["path"], scope.get("query_string", b""))
            if operation is not None:
                scope["app"] = self
                await self.edge.serve(AsgiDoor(scope, receive, send), operation)
                return
        await super().__call__(scope, receive, send)


class _Inference:
    """The inference routes' ASGI endpoint (reached only if ``GatewayApp.__call__`` was bypassed)."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await scope["app"].edge.serve(AsgiDoor(scope, receive, send), INFERENCE_PATHS[scope["path"]])


async def list_models(request: Request) -> Response:
    container = request.app.state.container
    key = container.ops.gate.authenticate(request.headers.get("authorization"))
    created = container.started_at
    clusters = container.settings.clusters
    data = [
        {"id": entry.id, "object": "model", "created": created, "owned_by": "kvgate",
         "serves": _serves(clusters.get(entry.cluster))}
        for entry in container.catalog.entries()
        if key.limits.allows(entry.id, entry.alias_of)
    ]
    return container.json({"object": "list", "data": data})


async def retrieve_model(request: Request) -> Response:
    """``GET /v1/models/{model}``: the model object ``GET /v1/models`` lists (a public name, an alias
    or a cluster the key may use); 404 ``model_not_found`` otherwise, as OpenAI answers (a name the
    key may not use reads as unknown: its existence is not the key's business)."""
    container = request.app.state.container
    key = container.ops.gate.authenticate(request.headers.get("authorization"))
    model = request.path_params["model"]
    entry = container.catalog.resolve(model)  # ModelNotFoundError (404) for an unknown name
    if not key.limits.allows(model, entry.alias_of):
        raise ModelNotFoundError(f"The model `{model}` does not exist or you do not have access to it.", param="model")
    serves = _serves(container.settings.clusters.get(entry.cluster))
    return container.json({"id": model, "object": "model", "created": container.started_at, "owned_by": "kvgate",
                           "serves": serves})


def _serves(cluster: Any) -> str:
    """What a model's primary cluster serves: ``generate`` or ``pooling`` (``[clusters.NAME] serves``)."""
    return getattr(cluster, "serves", "generate") if cluster is not None else "generate"


routes = [
    Route("/v1/chat/completions", _Inference(), methods=["POST"]),
    Route("/v1/completions", _Inference(), methods=["POST"]),
    Route("/v1/models", list_models, methods=["GET"]),
    Route("/v1/models/{model:path}", retrieve_model, methods=["GET"]),
]
