"""The per-request orchestrator: model -> route -> ranked endpoints -> attempt loop.

Flow of one inference request (ARCHITECTURE.md, "Flow of one chat request"):

1. Resolve the model name to a route (404 ``model_not_found``); apply ``X-Failover-Route``.
2. For each cluster of the route, primary first: snapshot its endpoints and schedule them.
3. Attempt loop, at most ``upstream.max_attempts`` attempts in all (one when failover is off):
   skip endpoints whose circuit breaker refuses; open the request; before the first byte
   reaches the client, a connection failure, a timeout, a 5xx/408/429, an empty body or an
   in-band error as the first stream event moves on (``gateway/failover.py``). An endpoint's
   other 4xx is the client's fault: relayed at once, never retried, never counted. A 5xx whose
   status and error message repeat what the previous endpoint answered to the same body is
   taken as caused by the request itself (an engine that fails on this input): the attempts
   stop there, and only the first of them counts against a breaker, so one client's bad input
   cannot open every breaker of a cluster.
4. Hand the open response over: a complete :class:`BufferedReply`, or a
   :class:`~gateway.relay.StreamRelay` that owns the in-flight slot until the
   stream ends or the client leaves, and may continue a broken plain-text stream on another
   endpoint of the same cluster (``gateway/continuation.py``).
5. Nothing could be tried (every breaker open): 503 with ``Retry-After`` = seconds until the
   earliest endpoint may be tried again.

The client's own API key never reaches an endpoint; each endpoint gets only its own credential.

Streams: kvgate asks every endpoint for the stream's usage (``stream_options.include_usage``)
even when the client did not, so that tokens, cost, TPM and budgets are always counted; the
relay strips that usage before the client sees it. An endpoint that answers such a request
with a 400 (or 422) naming ``stream_options`` is asked again at once without it, and is remembered (per
process) as one never to ask; its streams are then counted by estimate (``StreamRelay``). A
stream's preamble (comments, the role chunk) is held until content arrives (``hold_preamble``):
a stream that fails before content fails over like one that sent nothing.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway import failover
from gateway.continuation import continuable, continuation_body
from gateway.deadlines import deadline
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
from gateway.exchange import CANCELLED, CLIENT_ERROR, SUCCESS, UPSTREAM_ERROR, Exchange
from gateway.failover import Route
from gateway.keys.limits import estimate_prompt_tokens
from gateway.observability.metrics import GatewayMetrics
from gateway.keys.gate import Admission, KeyGate
from gateway.keys.model import KeyRecord
from gateway.protocol.openai import InferenceRequest, Operation, parse_request
from gateway.protocol.validation import check_content_type
from gateway.selection.selector import RouteSelector
from gateway.protocol.sse import StreamObserver
from gateway.selection.catalog import ModelCatalog
from gateway.scheduling.scheduler import Decision, Scheduler
from gateway.upstream.client import Upstream, UpstreamResponse
from gateway.relay import ClientDisconnected, StreamRelay, Upstreamed, hold_preamble

Watch = Callable[[Awaitable[Any]], Awaitable[Any]]
"""Awaits the forwarding step, raising :class:`ClientDisconnected` (and cancelling it) if the client leaves."""
ExchangeFactory = Callable[[str, str, Callable[[], float], Admission, Any], Exchange]
"""(request id, model, clock, admission, request state) -> a new exchange wired to the close-out."""


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class BufferedReply:
    """A complete non-streaming answer: the endpoint's status and body bytes, untouched.

    ``after``: the request's accounting still to do (prefix commit, breaker, closed loop, the
    exchange's end: metrics, cost, key usage). Whoever writes the answer calls :meth:`settle`
    right after writing it, without awaiting in between: the client gets its answer ~25 us
    sooner, and nothing else runs on the event loop before the accounting is done.
    """

    status: int
    body: bytes
    content_type: str
    after: Callable[[], None] | None = field(default=None, compare=False, repr=False)

    def settle(self) -> None:
        """Do the accounting left in ``after`` (once; later calls do nothing). Never raises on its own."""
        after, self.after = self.after, None
        if after is not None:
            after()


class _Retry(Exception):
    """This attempt failed before anything reached the client; try the next endpoint."""

    def __init__(
        self, error: GatewayError, reason: str, wait_s: float = 0.0, cool_s: float = 0.0,
        echo: tuple[int, str] | None = None,
    ) -> None:
        super().__init__(error.message)
        self.error = error
        self.reason = reason
        self.wait_s = wait_s
        self.cool_s = cool_s  # > 0: a 429's Retry-After; the endpoint cools, no failure is counted
        self.echo = echo  # a 5xx's (status, error message): the same from the next endpoint stops the attempts


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
        max_retry_after_s: float,
        clock: Callable[[], float],
        max_cooldown_s: float = 0.0,
        selector: RouteSelector | None = None,
        gate: KeyGate | None = None,
        exchanges: ExchangeFactory | None = None,
    ) -> None:
        self._selector = selector
        self._gate = gate
        self._exchanges = exchanges
        self._catalog = catalog
        self._registry = registry
        self._scheduler = scheduler
        self._upstream = upstream
        self._metrics = metrics
        self._max_attempts = max_attempts
        self._max_retry_after_s = max_retry_after_s
        self._max_cooldown_s = max_cooldown_s
        self._clock = clock
        self._refuses_usage: set[str] = set()  # endpoints that answered 400 to ``stream_options``

    async def handle(
        self,
        operation: Operation,
        headers: Mapping[str, str],
        raw: bytes,
        state: Any,
        watch: Watch,
        key: KeyRecord,
    ) -> tuple[BufferedReply | StreamRelay, dict[str, str]]:
        """Serve one inference request whose body ``raw`` was read by the edge.

        ``headers``: lowercase names. ``state``: the request's state, with its ``request_id`` (the
        exchange and the trace are put on it). ``key``: the authenticated client key.
        ``watch``: awaits the forwarding step, raising ClientDisconnected if the client leaves.
        Returns the reply and the ``x-kvgate-*`` headers to add; the caller calls a
        :class:`BufferedReply`'s ``settle()`` once it has written it.

        Raises:
            GatewayError: the OpenAI-shaped error to answer with (the exchange is finished).
            ClientDisconnected: the client left while the request was forwarded (finished as cancelled).
        """
        assert self._selector is not None and self._gate is not None and self._exchanges is not None
        check_content_type(headers.get("content-type"))
        parsed = parse_request(operation, raw)
        selector = self._selector
        routed = await selector.select(parsed, key, headers)
        route = self.route_for(parsed, headers.get("x-failover-route"), routed.route)
        admission = await self._gate.admit(
            key, parsed.model, len(raw), route.clusters, lambda: selector.reservation(routed, route, len(raw))
        )
        exchange = self._exchanges(state.request_id, parsed.model, self._clock, admission, state)
        selector.attach(exchange, routed)
        try:
            reply = await watch(self.forward(routed.request, exchange, route))
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

    def route_for(self, request: InferenceRequest, failover_header: str | None, selected: Route | None = None) -> Route:
        """The effective route: ``selected`` (route selection's) or the model's, then ``X-Failover-Route``.

        Raises ModelNotFoundError (404) or InvalidRequestError (400).
        """
        route = selected if selected is not None else self._catalog.resolve(request.model).route
        return failover.apply_failover_header(failover_header, route, self._catalog.routes)

    async def forward(self, request: InferenceRequest, exchange: Exchange, route: Route) -> BufferedReply | StreamRelay:
        """Send ``request`` along ``route`` to the first endpoint that answers.

        Raises:
            UpstreamClientError: the endpoint's own 4xx, relayed.
            UpstreamError, UpstreamTimeoutError, NoHealthyEndpointError: every attempt failed,
                or none could be made (502 / 504 / 503 with ``Retry-After``).
        """
        exchange.route, exchange.cluster = route.name, route.clusters[0]
        budget = self._max_attempts if route.failover else 1
        last: GatewayError | None = None
        echo: tuple[int, str] | None = None
        retry_at: list[float] = []
        wait_s = 0.0  # a Retry-After to honour before the next attempt, if one is made
        for cluster in route.clusters:
            endpoints = self._registry.cluster(cluster)
            if not endpoints:
                continue
            decision = await self._scheduler.schedule(endpoints, request)
            for endpoint in decision.ranked:
                if budget == 0:
                    break
                cooling = endpoint.cooling_until
                if cooling:
                    retry_at.append(cooling)
                    continue
                if not endpoint.breaker.available():
                    retry_at.append(endpoint.breaker.retry_at)
                    continue
                if wait_s:
                    await asyncio.sleep(wait_s)
                    wait_s = 0.0
                if not endpoint.breaker.allow():  # its one half-open probe went to another request meanwhile
                    retry_at.append(endpoint.breaker.retry_at)
                    continue
                budget -= 1
                if exchange.attempts and exchange.cluster != cluster:
                    self._metrics.failovers.labels(exchange.cluster, cluster).inc()
                exchange.cluster, exchange.endpoint, exchange.decision = cluster, endpoint.name, decision
                exchange.attempts += 1
                try:
                    return await self._attempt(endpoint, request, exchange, route, decision)
                except _Retry as retry:
                    if retry.echo is not None and retry.echo == echo:  # the body, not the endpoints
                        endpoint.breaker.release_probe()
                        self._metrics.upstream_failures.labels(endpoint.name, "repeated_" + retry.reason).inc()
                        raise retry.error from None
                    self._retried(endpoint, retry)
                    last, echo = retry.error, retry.echo
                    wait_s = retry.wait_s
            if budget == 0:
                break
        if last is not None:
            raise last
        raise self._unavailable(route, retry_at)

    def _retried(self, endpoint: Endpoint, retry: _Retry) -> None:
        """An attempt failed before the client saw a byte: a cooldown (429 with Retry-After) or a failure."""
        if retry.cool_s:
            endpoint.breaker.release_probe()
            endpoint.cool_down(retry.cool_s)
            endpoint.last_error = f"{retry.reason}: {retry.error.message}"
            self._metrics.upstream_failures.labels(endpoint.name, retry.reason).inc()
            return
        self._failed(endpoint, retry.reason, retry.error.message)

    def _unavailable(self, route: Route, retry_at: list[float]) -> NoHealthyEndpointError:
        wait = max(1, math.ceil(min(retry_at) - self._clock())) if retry_at else 1
        names = ", ".join(route.clusters)
        return NoHealthyEndpointError(
            f"No endpoint of {names} can take requests now (circuit breakers open or rate-limit cooldowns); "
            f"retry in {wait} s.",
            headers={"Retry-After": str(wait)},
        )

    def _failed(self, endpoint: Endpoint, reason: str, message: str) -> None:
        endpoint.record_failure(f"{reason}: {message}")
        self._metrics.upstream_failures.labels(endpoint.name, reason).inc()

    def _acquire(self, endpoint: Endpoint) -> None:
        endpoint.acquire()
        self._metrics.in_flight.labels(endpoint.name).inc()

    def _release(self, endpoint: Endpoint) -> None:
        endpoint.release()
        self._metrics.in_flight.labels(endpoint.name).dec()

    def _headers(self, endpoint: Endpoint, exchange: Exchange) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept-Encoding": "identity", "X-Request-Id": exchange.request_id}
        if endpoint.spec.api_key:
            headers["Authorization"] = f"Bearer {endpoint.spec.api_key}"
        return headers

    async def _attempt(
        self, endpoint: Endpoint, request: InferenceRequest, exchange: Exchange, route: Route, decision: Decision
    ) -> BufferedReply | StreamRelay:
        self._acquire(endpoint)
        handed_off = False
        try:
            served = endpoint.spec.served_model
            if request.stream:
                observer = StreamObserver(self._clock, collect=continuable(request) and route.failover)

                def body_for(ask: bool) -> bytes:
                    return request.body_for(served, ask_usage=ask)

                source = await self._open_usage_stream(endpoint, request, body_for, exchange, route, observer, observer.collect)
                decision.commit(endpoint)
                relay = self._relay(source, observer, request, exchange, route, decision)
                handed_off = True
                return relay
            reply = await self._buffered(endpoint, request, request.body_for(served), exchange, route)

            def after() -> None:
                decision.commit(endpoint)
                endpoint.record_success()
                usage = _usage_of(reply.body)
                decision.observe(endpoint, usage)
                exchange.finish(SUCCESS, usage=usage)

            reply.after = after
            return reply
        except UpstreamClientError:
            endpoint.breaker.release_probe()
            raise
        except asyncio.CancelledError:
            endpoint.breaker.release_probe()
            raise
        finally:
            if not handed_off:
                self._release(endpoint)

    async def _open(self, endpoint: Endpoint, request: InferenceRequest, body: bytes, exchange: Exchange, route: Route) -> UpstreamResponse:
        url = endpoint.spec.base_url + request.operation.path
        try:
            response = await self._upstream.post(url, body, self._headers(endpoint, exchange), route.timeouts.connect_s)
        except UpstreamTimeoutError as error:
            raise _Retry(_named(endpoint, error), "timeout") from None
        except UpstreamError as error:
            raise _Retry(_named(endpoint, error), "connect") from None
        if response.status < 300:
            return response
        raw = await self._read(endpoint, response)
        if response.status < 400:  # a redirect is never followed nor relayed: the prompt stays put
            message = f"Upstream endpoint '{endpoint.name}' answered a redirect (HTTP {response.status}); kvgate does not follow redirects."
            raise _Retry(UpstreamError(message), f"http_{response.status}")
        kept = failover.rate_limit_headers(response.headers)
        if failover.is_client_error(response.status):
            raise UpstreamClientError(response.status, raw, kept)
        wait = failover.retry_after_s(kept.get("retry-after"), self._max_retry_after_s)
        if response.status == 429:
            cool = failover.retry_after_s(kept.get("retry-after"), self._max_cooldown_s)
            raise _Retry(UpstreamClientError(429, raw, kept), "http_429", wait, cool)
        reason = error_message_of(raw, response.status, relay_text=False)  # never an HTML page or a Traceback
        message = f"Upstream endpoint '{endpoint.name}' returned HTTP {response.status}: {reason}"
        error_class = UpstreamTimeoutError if response.status in (408, 504) else UpstreamError
        echo = (response.status, reason) if response.status >= 500 else None
        raise _Retry(error_class(message), f"http_{response.status}", wait, echo=echo)

    async def _buffered(
        self, endpoint: Endpoint, request: InferenceRequest, body: bytes, exchange: Exchange, route: Route
    ) -> BufferedReply:
        response: UpstreamResponse | None = None
        try:
            with deadline(route.timeouts.total_s):
                response = await self._open(endpoint, request, body, exchange, route)
                raw = await self._read(endpoint, response)
        except TimeoutError:
            if response is not None:
                response.close()
            raise _Retry(UpstreamTimeoutError(f"Upstream endpoint '{endpoint.name}' timed out."), "timeout") from None
        except BaseException:
            if response is not None:
                response.close()
            raise
        if not raw.strip():
            raise _Retry(UpstreamError(f"Upstream endpoint '{endpoint.name}' sent an empty answer."), "empty_body")
        return BufferedReply(response.status, raw, response.headers.get("content-type", "application/json"))

    async def _read(self, endpoint: Endpoint, response: UpstreamResponse) -> bytes:
        try:
            return await response.read()
        except UpstreamTimeoutError as error:
            raise _Retry(_named(endpoint, error), "timeout") from None
        except UpstreamError as error:
            raise _Retry(_named(endpoint, error), "broken_body") from None

    def _asks_usage(self, request: InferenceRequest, endpoint: Endpoint) -> bool:
        return not request.wants_usage and endpoint.name not in self._refuses_usage

    async def _open_usage_stream(
        self,
        endpoint: Endpoint,
        request: InferenceRequest,
        body_for: Callable[[bool], bytes],
        exchange: Exchange,
        route: Route,
        observer: StreamObserver,
        by_event: bool,
    ) -> Upstreamed:
        """:meth:`_open_stream` asking for usage the client did not ask for (``body_for(True)``);
        once more without (``body_for(False)``) if the endpoint refuses ``stream_options``."""
        ask = self._asks_usage(request, endpoint)
        try:
            source = await self._open_stream(endpoint, request, body_for(ask), exchange, route, observer, by_event or ask)
        except UpstreamClientError as error:
            if not (ask and error.status in (400, 422) and "stream_options" in error.message):
                raise
            if len(self._refuses_usage) < 4096:  # bounded: endpoints remembered as refusing it
                self._refuses_usage.add(endpoint.name)
            ask = False
            source = await self._open_stream(endpoint, request, body_for(False), exchange, route, observer, by_event)
        source.strip_usage = ask
        return source

    async def _open_stream(
        self,
        endpoint: Endpoint,
        request: InferenceRequest,
        body: bytes,
        exchange: Exchange,
        route: Route,
        observer: StreamObserver,
        by_event: bool,
    ) -> Upstreamed:
        """Open a stream and read it until content (holding its preamble, ``hold_preamble``); fail
        over if it is empty, ends or breaks before content, or opens with an error."""
        response: UpstreamResponse | None = None
        try:
            with deadline(route.timeouts.first_byte_s):
                response = await self._open(endpoint, request, body, exchange, route)
                first, events, ended = await hold_preamble(response, observer, by_event=by_event)
        except TimeoutError:
            if response is not None:
                response.close()
            raise _Retry(UpstreamTimeoutError(f"Upstream endpoint '{endpoint.name}' sent nothing in time."), "timeout") from None
        except UpstreamTimeoutError as error:
            raise _Retry(_named(endpoint, error), "timeout") from None
        except UpstreamError as error:
            raise _Retry(_named(endpoint, error), "broken_body") from None
        except BaseException:  # cancelled (the client left): abort, so the engine stops generating
            if response is not None:
                response.close()
            raise
        if ended:  # nothing, or only comments and role chunks
            response.release()
            what = "an empty stream" if not first else "a stream that ended before any content"
            raise _Retry(UpstreamError(f"Upstream endpoint '{endpoint.name}' sent {what}."), "empty_body")
        if observer.error is not None and observer.output_events == 0:
            response.close()
            message = str(observer.error.get("message") or "in-band error event")
            raise _Retry(UpstreamError(f"Upstream endpoint '{endpoint.name}' failed: {message}"), "stream_error")
        return Upstreamed(endpoint, response, first, events)

    def _relay(
        self,
        source: Upstreamed,
        observer: StreamObserver,
        request: InferenceRequest,
        exchange: Exchange,
        route: Route,
        decision: Decision,
    ) -> StreamRelay:
        async def resume(seen: StreamObserver, tried: set[str]) -> Upstreamed | None:
            return await self._resume(request, exchange, route, decision, seen, tried)

        return StreamRelay(
            source=source,
            observer=observer,
            exchange=exchange,
            on_release=self._release,
            on_failure=self._failed,
            idle_s=route.timeouts.idle_s,
            resume=resume if observer.collect else None,
            prompt_tokens=estimate_prompt_tokens(len(request.raw)),
        )

    async def _resume(
        self,
        request: InferenceRequest,
        exchange: Exchange,
        route: Route,
        decision: Decision,
        seen: StreamObserver,
        tried: set[str],
    ) -> Upstreamed | None:
        """Continue the answer ``seen`` so far on another endpoint of the same cluster, or None."""
        for endpoint in decision.ranked:
            if endpoint.name in tried or endpoint.cooling_until or not endpoint.breaker.allow():
                continue
            served, ask = endpoint.spec.served_model, self._asks_usage(request, endpoint)
            body = continuation_body(request, seen, served, ask_usage=ask)
            if body is None:
                return None

            def body_for(asking: bool, served: str = served, body: bytes = body, ask: bool = ask) -> bytes:
                return body if asking == ask else continuation_body(request, seen, served, ask_usage=asking) or b""

            self._acquire(endpoint)
            try:
                scratch = StreamObserver(self._clock)
                source = await self._open_usage_stream(endpoint, request, body_for, exchange, route, scratch, False)
            except (_Retry, UpstreamClientError) as failure:
                self._release(endpoint)
                if isinstance(failure, _Retry):
                    self._retried(endpoint, failure)  # a 429 with Retry-After cools, no failure counted
                else:
                    endpoint.breaker.release_probe()
                tried.add(endpoint.name)
                continue
            except BaseException:
                self._release(endpoint)
                endpoint.breaker.release_probe()
                raise
            self._metrics.continuations.labels(exchange.cluster).inc()
            return Upstreamed(source.endpoint, source.response, source.first, None, source.strip_usage)
        return None


def _usage_of(body: bytes) -> object:
    """The ``usage`` object of a non-streaming answer, or None (never raises)."""
    if b'"usage"' not in body:
        return None
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return parsed.get("usage") if isinstance(parsed, dict) else None
