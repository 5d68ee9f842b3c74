"""The JSON access log of every request, and the server span of the routes that are not inference.

Inference requests (``POST /v1/chat/completions``, ``/v1/completions``) are served by the edge
(``api/edge.py``) on every door; with ``server.access_log`` on, the edge writes their line with
:func:`gateway.closeout.access_line` once the request is over (after its close-out, so the exchange is final),
and with tracing on it owns their span too.

:class:`AccessMiddleware` does the same for every other route (admin, ``/v1/models``, health,
metrics). It is installed by ``create_app`` only when tracing or the access log is on, inside
:class:`~gateway.api.middleware.RequestIdMiddleware` (so the request id exists). It wraps the
whole response: the span and the log line are written when the last body byte was sent or the
app raised.

A line has ``request_id``, ``method``, ``path``, ``status`` and ``duration_ms``; for inference the
:class:`~gateway.exchange.Exchange`'s model, route, cluster, endpoint, outcome, attempts, key id
and token counts join it. With ``logging.log_payloads`` the first 4 KiB of the request and
response bodies are added (``request_body``, ``response_body``); otherwise no body is read here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.trace import Tracer

from gateway.closeout import access_fields
from gateway.observability.tracing import CURRENT, RequestTrace

log = logging.getLogger("kvgate.access")

PAYLOAD_LIMIT = 4096


def scope_fields(scope: dict[str, Any], status: int, duration_s: float) -> dict[str, Any]:
    """The access-log fields of a finished request, from its ASGI ``scope`` (pure; the close-out's
    :func:`~gateway.closeout.access_fields`, so every door and route logs the same fields)."""
    state = scope.get("state") or {}
    return access_fields(
        state.get("exchange"), request_id=state.get("request_id"), method=scope.get("method"), path=scope.get("path"),
        status=status, duration_s=duration_s,
    )


class _Capture:
    """The first ``PAYLOAD_LIMIT`` bytes of a body."""

    __slots__ = ("parts", "size")

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, chunk: bytes) -> None:
        if self.size < PAYLOAD_LIMIT and chunk:
            piece = chunk[: PAYLOAD_LIMIT - self.size]
            self.parts.append(piece)
            self.size += len(piece)

    def text(self) -> str:
        return b"".join(self.parts).decode("utf-8", "replace")


class AccessMiddleware:
    def __init__(
        self,
        app: Any,
        *,
        tracer: Tracer | None = None,
        access_log: bool = False,
        log_payloads: bool = False,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.app = app
        self._tracer = tracer
        self._access_log = access_log
        self._payloads = log_payloads and access_log
        self._clock = clock

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = self._clock()
        status = 500
        request_body, response_body = (_Capture(), _Capture()) if self._payloads else (None, None)
        trace = RequestTrace(self._tracer, scope) if self._tracer is not None else None
        token = CURRENT.set(trace) if trace is not None else None
        if trace is not None:
            scope.setdefault("state", {})["trace"] = trace

        async def receive_observed() -> Any:
            message = await receive()
            if request_body is not None and message["type"] == "http.request":
                request_body.add(message.get("body", b""))
            return message

        async def send_observed(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif response_body is not None and message["type"] == "http.response.body":
                response_body.add(message.get("body", b""))
            await send(message)

        error: BaseException | None = None
        try:
            await self.app(scope, receive_observed if request_body is not None else receive, send_observed)
        except BaseException as raised:
            error = raised
            raise
        finally:
            if trace is not None:
                route = scope.get("route")
                if getattr(route, "path", None):
                    trace.server.update_name(f"{scope.get('method')} {route.path}")
                trace.end(status, error if isinstance(error, Exception) else None)
                CURRENT.reset(token)  # type: ignore[arg-type]
            if self._access_log:
                self._log(scope, status, started, request_body, response_body)

    def _log(
        self, scope: dict[str, Any], status: int, started: float, request_body: _Capture | None, response_body: _Capture | None
    ) -> None:
        fields = scope_fields(scope, status, self._clock() - started)
        if request_body is not None and response_body is not None:
            fields["request_body"] = request_body.text()
            fields["response_body"] = response_body.text()
        log.info("%s %s %d", scope.get("method"), scope.get("path"), status, extra={"fields": fields})
