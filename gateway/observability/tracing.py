"""OpenTelemetry traces: one server span per request, one client span per upstream attempt.

Off by default (``[tracing] enabled = false``): then no provider exists, the access middleware
creates no :class:`RequestTrace` and the upstream client is not wrapped, so the request path does
nothing extra. When on, spans go to an OTLP/HTTP exporter (``tracing.otlp_endpoint``) through a
batch processor; tests pass their own provider (``create_app(tracer_provider=...)``).

Spans follow the OpenTelemetry semantic conventions for HTTP and GenAI (semconv 1.37+):

* server span ``POST /v1/chat/completions`` (kind SERVER), parented on an incoming W3C
  ``traceparent``: ``http.request.method``, ``url.path``, ``http.response.status_code``,
  ``gen_ai.operation.name`` (``chat`` / ``text_completion``; another API's name from
  ``gateway/protocol/apis.py``, e.g. ``responses``, ``embeddings``), ``kvgate.api``, ``gen_ai.request.model``,
  ``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``,
  ``gen_ai.usage.cache_read.input_tokens``, ``gen_ai.response.finish_reasons``, ``error.type``,
  and kvgate's routing attributes ``kvgate.route``, ``kvgate.cluster``, ``kvgate.endpoint``,
  ``kvgate.attempts``, ``kvgate.cost_usd``, ``kvgate.key_id``, ``kvgate.request_id``.
* client span ``chat SERVED_MODEL`` (kind CLIENT) per attempt, a child of the server span:
  ``gen_ai.provider.name`` (``openai`` for api.openai.com, else ``openai_compatible``),
  ``gen_ai.request.model`` (the endpoint's served name), ``http.request.method`` (``POST``; ``GET`` /
  ``DELETE`` for a stored response's retrieve and delete), ``server.address``, ``server.port``,
  ``http.response.status_code``, ``kvgate.cluster``, ``kvgate.endpoint``,
  ``kvgate.failover.hop`` (0 for the first attempt), ``kvgate.prefix.match_ratio`` (the
  prefix scorer's [0, 1] score for the endpoint, when the scheduler produced one), and on the
  attempt that answered, the same usage and finish-reason attributes as the server span. The
  W3C ``traceparent`` of the client span is sent to the endpoint.

Prompts and completions are never put on spans.
"""

from __future__ import annotations

import contextvars
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.errors import GatewayError
from gateway.config import TracingSettings

PROPAGATOR = TraceContextTextMapPropagator()
CURRENT: contextvars.ContextVar[RequestTrace | None] = contextvars.ContextVar("kvgate_request_trace", default=None)
_FINISH_REASON = re.compile(rb'"finish_reason"\s*:\s*"([A-Za-z_]+)"')
_OPERATIONS = {"/v1/chat/completions": "chat", "/v1/completions": "text_completion"}


def build_tracer_provider(settings: TracingSettings) -> TracerProvider | None:
    """The exporting provider of ``[tracing]``, or None when tracing is off."""
    if not settings.enabled:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    provider = TracerProvider(
        resource=Resource.create({"service.name": settings.service_name}),
        sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)),
    )
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=settings.otlp_endpoint)))
    return provider


def _provider_name(url: str) -> str:
    host = urlsplit(url).hostname or ""
    return "openai" if host == "api.openai.com" else "openai_compatible"


def usage_attributes(exchange: Any, tokens: Any) -> dict[str, Any]:
    """GenAI usage attributes of a finished exchange (``tokens`` is a TokenUsage or None)."""
    attributes: dict[str, Any] = {}
    if tokens is not None:
        attributes["gen_ai.usage.input_tokens"] = tokens.input
        attributes["gen_ai.usage.output_tokens"] = tokens.output
        attributes["gen_ai.usage.cache_read.input_tokens"] = tokens.cached
    return attributes


class RequestTrace:
    """The spans of one request; made by the access middleware, found through :data:`CURRENT`."""

    def __init__(self, tracer: trace.Tracer, scope: Mapping[str, Any]) -> None:
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers", ())}
        parent = PROPAGATOR.extract(headers)
        self.operation = _OPERATIONS.get(scope.get("path", ""))
        self.tracer = tracer
        self.server = tracer.start_span(
            f"{scope.get('method', 'GET')} {scope.get('path', '')}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={
                "http.request.method": scope.get("method", ""),
                "url.path": scope.get("path", ""),
                "kvgate.request_id": (scope.get("state") or {}).get("request_id", ""),
            },
        )
        self.client: Span | None = None
        self.hops = 0
        self.finish_reasons: list[str] = []
        self.exchange: Any = None

    # -- client spans (called by TracedUpstream) ---------------------------------------------

    def start_attempt(self, url: str, headers: Mapping[str, str], method: str = "POST") -> dict[str, str]:
        """Open the client span of a new attempt (``method``: its HTTP method); the headers to send,
        with ``traceparent``. The operation is the path's (``chat``, ``text_completion``), else the
        exchange's API name (``responses``, ``responses.retrieve``, ``embeddings``, ...)."""
        self.end_attempt(error="superseded")
        exchange = self.exchange
        parts = urlsplit(url)
        operation = self.operation or (exchange.api if exchange is not None else None) or "chat"
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "http.request.method": method,
            "gen_ai.provider.name": _provider_name(url),
            "server.address": parts.hostname or "",
            "server.port": parts.port or (443 if parts.scheme == "https" else 80),
            "kvgate.failover.hop": self.hops,
        }
        served = None
        if exchange is not None:
            attributes["kvgate.cluster"] = exchange.cluster
            attributes["kvgate.endpoint"] = exchange.endpoint
            ratio = _prefix_ratio(exchange.decision, exchange.endpoint)
            if ratio is not None:
                attributes["kvgate.prefix.match_ratio"] = ratio
            served = _served_model(exchange)
        if served:
            attributes["gen_ai.request.model"] = served
        self.hops += 1
        context = trace.set_span_in_context(self.server)
        name = f"{attributes['gen_ai.operation.name']} {served or ''}".strip()
        self.client = self.tracer.start_span(name, context=context, kind=SpanKind.CLIENT, attributes=attributes)
        carrier = dict(headers)
        PROPAGATOR.inject(carrier, context=trace.set_span_in_context(self.client))
        return carrier

    def attempt_status(self, status: int) -> None:
        if self.client is not None:
            self.client.set_attribute("http.response.status_code", status)

    def observe_body(self, chunk: bytes) -> None:
        """Note finish reasons in answer bytes (a cheap scan; only while tracing)."""
        if b"finish_reason" in chunk:
            self.finish_reasons.extend(match.decode() for match in _FINISH_REASON.findall(chunk))

    def end_attempt(self, *, error: str | None = None, attributes: Mapping[str, Any] | None = None) -> None:
        span, self.client = self.client, None
        if span is None:
            return
        if attributes:
            span.set_attributes(attributes)
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    # -- the request's end ----------------------------------------------------------------------

    def finish(self, exchange: Any, tokens: Any, cost_usd: float) -> None:
        """The exchange ended: usage on the open client span (ending it) and on the server span."""
        attributes = usage_attributes(exchange, tokens)
        if self.finish_reasons:
            attributes["gen_ai.response.finish_reasons"] = list(dict.fromkeys(self.finish_reasons))
        failed = exchange.outcome not in ("success",)
        self.end_attempt(error=(exchange.error_type or exchange.outcome) if failed else None, attributes=attributes)
        server = {
            **attributes,
            "gen_ai.operation.name": self.operation or getattr(exchange, "api", None) or "chat",
            "kvgate.api": getattr(exchange, "api", None) or "chat",
            "gen_ai.request.model": exchange.model,
            "kvgate.route": getattr(exchange, "route", "") or "",
            "kvgate.cluster": exchange.cluster,
            "kvgate.endpoint": exchange.endpoint,
            "kvgate.attempts": getattr(exchange, "attempts", 0) or 0,
            "kvgate.outcome": exchange.outcome or "",
            "kvgate.cost_usd": cost_usd,
        }
        admission = exchange.admission
        if admission is not None:
            server["kvgate.key_id"] = admission.key.id
        self.server.set_attributes(server)
        if failed:
            self.server.set_attribute("error.type", exchange.error_type or exchange.outcome or "error")

    def end(self, status: int, error: BaseException | None = None) -> None:
        """The response is complete (or the app raised): end every span."""
        self.end_attempt(error="unfinished")
        self.server.set_attribute("http.response.status_code", status)
        if error is not None:
            self.server.record_exception(error)
            self.server.set_attribute("error.type", type(error).__qualname__)
            self.server.set_status(Status(StatusCode.ERROR, type(error).__qualname__))
        elif status >= 500:
            self.server.set_status(Status(StatusCode.ERROR))
            self.server.set_attribute("error.type", str(status))
        self.server.end()


def _prefix_ratio(decision: Any, endpoint: str) -> float | None:
    breakdown = getattr(decision, "breakdown", None)
    if not isinstance(breakdown, Mapping):
        return None
    scores = breakdown.get(endpoint)
    value = scores.get("prefix") if isinstance(scores, Mapping) else None
    return float(value) if isinstance(value, (int, float)) else None


def _served_model(exchange: Any) -> str | None:
    decision = exchange.decision
    for endpoint in getattr(decision, "ranked", ()) or ():
        if endpoint.name == exchange.endpoint:
            return str(endpoint.spec.served_model)
    return None


class _TracedResponse:
    """An upstream response that ends its client span when it fails or is aborted."""

    __slots__ = ("_inner", "_trace", "status", "headers")

    def __init__(self, inner: Any, request_trace: RequestTrace) -> None:
        self._inner = inner
        self._trace = request_trace
        self.status = inner.status
        self.headers = inner.headers

    def _failed(self) -> None:
        if self.status >= 400:
            self._trace.end_attempt(error=str(self.status))

    async def read(self) -> bytes:
        try:
            body = await self._inner.read()
        except GatewayError as error:
            self._trace.end_attempt(error=error.code or "upstream_error")
            raise
        self._trace.observe_body(body)
        self._failed()
        return body

    async def next_chunk(self) -> bytes:
        try:
            chunk = await self._inner.next_chunk()
        except GatewayError as error:
            self._trace.end_attempt(error=error.code or "upstream_error")
            raise
        self._trace.observe_body(chunk)
        return chunk

    def close(self) -> None:
        self._inner.close()
        self._trace.end_attempt(error=str(self.status) if self.status >= 400 else "aborted")

    def release(self) -> None:
        self._inner.release()
        self._failed()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class TracedUpstream:
    """Wraps an :class:`~gateway.upstream.client.Upstream`; used only while tracing is on. Every
    upstream call of a traced request gets a client span: :meth:`post` (chat, completions and the
    other APIs' POSTs) and :meth:`request` (``GET`` / ``DELETE`` of a stored response)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], *args: Any, **kwargs: Any) -> Any:
        return await self._traced(self._inner.post, url, body, headers, *args, **kwargs)

    async def request(self, method: str, url: str, body: bytes, headers: Mapping[str, str], *args: Any,
                      **kwargs: Any) -> Any:
        """As :meth:`post`, for another HTTP ``method`` (the client span carries ``http.request.method``)."""
        async def call(url: str, body: bytes, headers: Mapping[str, str], *args: Any, **kwargs: Any) -> Any:
            return await self._inner.request(method, url, body, headers, *args, **kwargs)

        return await self._traced(call, url, body, headers, *args, method=method, **kwargs)

    async def _traced(self, call: Any, url: str, body: bytes, headers: Mapping[str, str], *args: Any,
                      method: str = "POST", **kwargs: Any) -> Any:
        request_trace = CURRENT.get()
        if request_trace is None:
            return await call(url, body, headers, *args, **kwargs)
        headers = request_trace.start_attempt(url, headers, method)
        try:
            response = await call(url, body, headers, *args, **kwargs)
        except GatewayError as error:
            request_trace.end_attempt(error=error.code or "upstream_error")
            raise
        request_trace.attempt_status(response.status)
        return _TracedResponse(response, request_trace)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
