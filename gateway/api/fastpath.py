"""The hot path: inference requests handled straight from the ASGI entry point.

Profiling kvgate under load (``bench/overhead``, py-spy) showed a fixed cost per request in the
generic layers every request crossed before reaching ``/v1/chat/completions``: Starlette's
server-error and exception middleware, FastAPI's wrappers, the request-id middleware and the
router's pattern matching over every admin route. ``POST /v1/chat/completions`` and
``POST /v1/completions`` are served by :class:`GatewayApp` directly instead, with the same
semantics those layers gave them:

* the request id (``X-Request-Id`` in, ``x-request-id`` out; see ``api/middleware.py``);
* a :class:`~gateway.errors.GatewayError` becomes its OpenAI-shaped response;
* anything else is logged and becomes an OpenAI-shaped 500 ``server_error``, never a trace.

Every other route (admin, health, metrics, ``/v1/models``) still goes through FastAPI. When
tracing or the access log is on, their middleware must see inference requests too, so the fast
path is switched off and inference requests take the generic path.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Response
from starlette.requests import Request

from gateway.api.middleware import incoming_request_id, new_request_id
from gateway.api.openai import inference
from gateway.errors import GatewayError
from gateway.protocol.openai import Operation

log = logging.getLogger("kvgate")

FAST_PATHS = {"/v1/chat/completions": Operation.CHAT, "/v1/completions": Operation.COMPLETION}
"""The inference routes served before the middleware stack (and without ASGI by ``api/server.py``)."""


def error_response(error: GatewayError) -> Response:
    """The OpenAI-shaped JSON response for ``error``."""
    return Response(error.body(), error.status, error.headers, media_type="application/json")


class GatewayApp(FastAPI):
    """FastAPI, with inference requests dispatched before the middleware stack (see module doc)."""

    fast_path: bool = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self.fast_path and scope["type"] == "http" and scope["method"] == "POST":
            operation = FAST_PATHS.get(scope["path"])
            if operation is not None:
                await self._serve_inference(operation, scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    async def _serve_inference(self, operation: Operation, scope: Any, receive: Any, send: Any) -> None:
        scope["app"] = self
        raw_id = incoming_request_id(scope["headers"]) or new_request_id()
        scope.setdefault("state", {})["request_id"] = raw_id.decode()

        async def send_with_id(message: Any) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), (b"x-request-id", raw_id)]
            await send(message)

        request = Request(scope, receive)
        try:
            response = await inference(request, operation)
        except GatewayError as error:
            response = error_response(error)
        except Exception:
            log.exception("unhandled error on POST %s", scope["path"])
            response = error_response(GatewayError("The gateway had an internal error. It has been logged."))
        await response(scope, receive, send_with_id)
