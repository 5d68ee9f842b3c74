"""The per-request orchestrator: model -> cluster -> ranked endpoints -> attempt loop.

Flow of one inference request (see ARCHITECTURE.md, "Flow of one chat request"):

1. Resolve the model name to a cluster (404 ``model_not_found``).
2. Snapshot the cluster's endpoints and rank them with the configured scheduler.
3. Attempt loop, at most ``upstream.max_attempts`` endpoints: open the upstream request; before
   the first byte reaches the client, a connection failure, a timeout, a 5xx/408/429, an empty
   body or an in-band error as the first stream event moves on to the next endpoint. An
   endpoint's 4xx (other than 408/429) is the client's fault: relayed at once, never retried,
   never counted against the endpoint.
4. Hand the open response to the caller: a complete :class:`BufferedReply`, or a
   :class:`~gateway.upstream.streaming.StreamRelay` that owns the in-flight slot until the
   stream ends or the client leaves.

The client's own API key never reaches an endpoint; each endpoint gets only its own credential.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import orjson

from gateway.endpoints.model import Endpoint
from gateway.endpoints.registry import EndpointRegistry
from gateway.errors import (
    GatewayError,
    NoHealthyEndpointError,
    UpstreamClientError,
    UpstreamError,
    UpstreamTimeoutError,
    error_message_of,
)
from gateway.exchange import SUCCESS, Exchange
from gateway.observability.metrics import GatewayMetrics
from gateway.protocol.openai import InferenceRequest
from gateway.protocol.sse import StreamObserver
from gateway.routes.catalog import ModelCatalog
from gateway.routing.scheduler import Scheduler
from gateway.upstream.client import Upstream, UpstreamResponse
from gateway.upstream.streaming import StreamRelay

_RETRYABLE_CLIENT_STATUSES = frozenset({408, 429})
_RELAYED_HEADERS = ("retry-after",)


@dataclass(frozen=True, slots=True)
class BufferedReply:
    """A complete non-streaming answer: the endpoint's status and body bytes, untouched."""

    status: int
    body: bytes
    content_type: str


class _Retry(Exception):
    """This attempt failed before anything reached the client; try the next endpoint."""

    def __init__(self, error: GatewayError, reason: str) -> None:
        super().__init__(error.message)
        self.error = error
        self.reason = reason


def _named(endpoint: Endpoint, error: GatewayError) -> GatewayError:
    """The same error class, its message prefixed with the endpoint's name (never its URL)."""
    return type(error)(f"Upstream endpoint '{endpoint.name}' failed: {error.message}.")


class Proxy:
    """Forwards inference requests. Built once per app by ``create_app``."""

    def __init__(
        self,
        *,
        catalog: ModelCatalog,
        registry: EndpointRegistry,
        scheduler: Scheduler,
        upstream: Upstream,
        metrics: GatewayMetrics,
        max_attempts: int,
        clock: Callable[[], float],
    ) -> None:
        self._catalog = catalog
        self._registry = registry
        self._scheduler = scheduler
        self._upstream = upstream
        self._metrics = metrics
        self._max_attempts = max_attempts
        self._clock = clock

    async def forward(self, request: InferenceRequest, exchange: Exchange) -> BufferedReply | StreamRelay:
        """Send ``request`` to the best endpoint that answers.

        Raises:
            ModelNotFoundError: unknown model (404).
            UpstreamClientError: the endpoint's own 4xx, relayed.
            UpstreamError, UpstreamTimeoutError, NoHealthyEndpointError: every attempt failed
                (502 / 504 / 503).
        """
        entry = self._catalog.resolve(request.model)
        exchange.cluster = entry.cluster
        endpoints = self._registry.cluster(entry.cluster)
        if not endpoints:
            raise NoHealthyEndpointError(f"Cluster '{entry.cluster}' has no endpoints.")
        decision = await self._scheduler.schedule(endpoints, request)
        if not decision.ranked:
            raise NoHealthyEndpointError(f"Cluster '{entry.cluster}' has no endpoint taking new requests.")
        exchange.decision = decision
        last: GatewayError | None = None
        for endpoint in decision.ranked[: self._max_attempts]:
            exchange.endpoint = endpoint.name
            try:
                return await self._attempt(endpoint, request, exchange)
            except _Retry as retry:
                endpoint.record_failure(retry.reason)
                self._metrics.upstream_failures.labels(endpoint.name, retry.reason).inc()
                last = retry.error
        assert last is not None
        raise last

    async def _attempt(
        self, endpoint: Endpoint, request: InferenceRequest, exchange: Exchange
    ) -> BufferedReply | StreamRelay:
        spec = endpoint.spec
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity", "X-Request-Id": exchange.request_id}
        if spec.api_key:
            headers["Authorization"] = f"Bearer {spec.api_key}"
        endpoint.acquire()
        gauge = self._metrics.in_flight.labels(endpoint.name)
        gauge.inc()
        handed_off = False
        try:
            response = await self._open(endpoint, request, headers)
            exchange.decision.commit(endpoint)
            if request.stream:
                relay = await self._first_chunk(endpoint, response, exchange)
                handed_off = True
                return relay
            body = await self._read(endpoint, response)
            endpoint.record_success()
            usage = _usage_of(body)
            exchange.decision.observe(endpoint, usage)
            exchange.finish(SUCCESS, usage=usage)
            return BufferedReply(response.status, body, response.headers.get("content-type", "application/json"))
        finally:
            if not handed_off:
                endpoint.release()
                gauge.dec()

    async def _open(self, endpoint: Endpoint, request: InferenceRequest, headers: dict[str, str]) -> UpstreamResponse:
        url = endpoint.spec.base_url + request.operation.path
        try:
            response = await self._upstream.post(url, request.body_for(endpoint.spec.served_model), headers)
        except UpstreamTimeoutError as error:
            raise _Retry(_named(endpoint, error), "timeout") from None
        except UpstreamError as error:
            raise _Retry(_named(endpoint, error), "connect") from None
        if response.status < 400:
            return response
        raw = await self._read(endpoint, response)
        kept = {name: response.headers[name] for name in _RELAYED_HEADERS if name in response.headers}
        if response.status < 500 and response.status not in _RETRYABLE_CLIENT_STATUSES:
            raise UpstreamClientError(response.status, raw, kept)
        message = f"Upstream endpoint '{endpoint.name}' returned HTTP {response.status}: {error_message_of(raw)}"
        if response.status in _RETRYABLE_CLIENT_STATUSES:
            raise _Retry(UpstreamClientError(response.status, raw, kept), f"http_{response.status}")
        error_class = UpstreamTimeoutError if response.status == 504 else UpstreamError
        raise _Retry(error_class(message), "http_5xx")

    async def _read(self, endpoint: Endpoint, response: UpstreamResponse) -> bytes:
        try:
            return await response.read()
        except UpstreamTimeoutError as error:
            raise _Retry(_named(endpoint, error), "timeout") from None
        except UpstreamError as error:
            raise _Retry(_named(endpoint, error), "broken_body") from None

    async def _first_chunk(self, endpoint: Endpoint, response: UpstreamResponse, exchange: Exchange) -> StreamRelay:
        """Wait for the stream's first bytes; fail over if it is empty or opens with an error."""
        observer = StreamObserver(self._clock)
        try:
            first = await response.next_chunk()
        except UpstreamTimeoutError as error:
            raise _Retry(_named(endpoint, error), "timeout") from None
        except UpstreamError as error:
            raise _Retry(_named(endpoint, error), "broken_body") from None
        if not first:
            response.release()
            raise _Retry(UpstreamError(f"Upstream endpoint '{endpoint.name}' sent an empty stream."), "empty_body")
        observer.feed(first)
        if observer.error is not None and observer.first_token_at is None:
            response.close()
            message = str(observer.error.get("message") or "in-band error event")
            raise _Retry(UpstreamError(f"Upstream endpoint '{endpoint.name}' failed: {message}"), "stream_error")
        return StreamRelay(
            first=first,
            response=response,
            observer=observer,
            endpoint=endpoint,
            exchange=exchange,
            in_flight_gauge=self._metrics.in_flight.labels(endpoint.name),
            failures=self._metrics.upstream_failures,
        )


def _usage_of(body: bytes) -> object:
    """The ``usage`` object of a non-streaming answer, or None (never raises)."""
    if b'"usage"' not in body:
        return None
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return parsed.get("usage") if isinstance(parsed, dict) else None
