"""The director: one inference request, in order, from its body to its reply.

:meth:`Proxy.handle` reads as ARCHITECTURE.md's "Flow of one chat request":

1. parse once (``protocol/``), after the content-type check;
2. route selection (``selection/selector.py``) -> a route, then ``X-Failover-Route``
   (``failover.apply_failover_header``); 404 ``model_not_found``, 400 on a bad header; only the
   route's clusters that generate (``ApiDirector.serving``: 400 ``model_not_supported`` for a
   model served by pooling clusters alone);
3. the key's quota on what will serve it (``keys/gate.py``: 401/403/429 with ``Retry-After``),
   and the exchange that closes the request out (``closeout.py``);
4. admission (:meth:`Proxy.admit`, ``gateway/admission/``, when ``[admission]`` is on): admit at
   once, wait in the gateway queue (under the client-left watch: a client that leaves is removed
   at once), spill over (the route's ``spill_to`` target first, ``reason=spill_saturated``; not a
   failure) or shed (429/503 with ``Retry-After``); the request's lease is held by the exchange
   until it finishes and by each attempt until it ends, and handed back to the gate once;
5. for each cluster of the route, primary first: schedule its endpoints (``scheduling/``),
   then attempts (:meth:`Proxy.forward`), at most ``upstream.max_attempts`` in all (one when
   failover is off): skip endpoints cooling or refused by their breaker; each try is an
   :class:`~gateway.attempt.Attempt`; before the first byte reaches the client a connection
   failure, a timeout, a 5xx/408/429, an empty body or an in-band error as the first stream event
   moves on (``failover.classify``). An endpoint's other 4xx is the client's fault: relayed at
   once, never retried, never counted. A 5xx whose status and error message repeat what the
   previous endpoint answered to the same body is taken as caused by the request itself: the
   attempts stop there, and only the first of them counts against a breaker;
6. reply: a complete :class:`~gateway.attempt.BufferedReply`, or a
   :class:`~gateway.relay.StreamRelay` that owns the attempt until the stream ends or the client
   leaves, and may continue a broken plain-text stream elsewhere (a
   :class:`~gateway.attempt.Continuation`). Nothing could be tried (every breaker open or every
   endpoint cooling): 503 with ``Retry-After`` = seconds until the earliest may be tried.

Streams: kvgate asks every endpoint for the stream's usage (``stream_options.include_usage``)
even when the client did not, so that tokens, cost, TPM and budgets are always counted; the
relay strips that usage before the client sees it (``attempt.Opener`` retries once without it
when an endpoint refuses it). A stream's preamble (comments, the role chunk) is held until
content arrives (``attempt.hold_preamble``): a stream that fails before content fails over like
one that sent nothing.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from gateway import failover
from gateway.admission.decision import Action
from gateway.admission.gate import AdmissionGate, Ask
from gateway.attempt import Attempt, BufferedReply, Continuation, Opener, Retry
from gateway.closeout import CloseOut
from gateway.continuation import continuable
from gateway.endpoints.model import Endpoint
from gateway.endpoints.registry import EndpointRegistry
from gateway.errors import GatewayError, NoHealthyEndpointError
from gateway.exchange import CANCELLED, CLIENT_ERROR, UPSTREAM_ERROR, Exchange
from gateway.keys.gate import KeyGate
from gateway.keys.limits import estimate_prompt_tokens
from gateway.keys.model import KeyRecord
from gateway.observability.metrics import GatewayMetrics
from gateway.protocol.apis import BY_NAME, ApiCall
from gateway.protocol.offload import ParseOffload
from gateway.protocol.openai import InferenceRequest, Operation, parse_request
from gateway.protocol.sse import StreamObserver
from gateway.protocol.validation import check_content_encoding, check_content_type
from gateway.relay import ClientDisconnected, StreamRelay
from gateway.scheduling.scheduler import Decision, Scheduler
from gateway.selection.catalog import ModelCatalog
from gateway.selection.route import Route
from gateway.selection.selector import Routed, RouteSelector
from gateway.turns import TurnGate

__all__ = ["BufferedReply", "Proxy", "Reply", "StreamRelay", "Watch"]

Watch = Callable[[Awaitable[Any]], Awaitable[Any]]
"""Awaits the forwarding step, raising :class:`ClientDisconnected` (and cancelling it) if the client leaves."""
Reply = BufferedReply | StreamRelay
"""What the director answers with: a complete answer, or a stream relay (an ASGI response)."""


_API_ROWS = {Operation.CHAT: BY_NAME["chat"], Operation.COMPLETION: BY_NAME["completions"]}  # protocol/apis.py


class Proxy:
    """The director. Built once per app by ``create_app``.

    ``apis``: the director of the other APIs (Responses, Messages, embeddings: ``gateway/api_director.py``),
    set by ``create_app``; :meth:`handle` hands it every :class:`~gateway.protocol.apis.ApiCall`.
    """

    apis: Any = None

    def __init__(
        self,
        *,
        selector: RouteSelector,
        gate: KeyGate,
        catalog: ModelCatalog,
        registry: EndpointRegistry,
        scheduler: Scheduler,
        opener: Opener,
        closeout: CloseOut,
        metrics: GatewayMetrics,
        admission: AdmissionGate | None = None,
        parse_offload: ParseOffload | None = None,
    ) -> None:
        """``opener``: opens attempts on endpoints (the upstream, its clock, the Retry-After caps,
        ``upstream.max_attempts``); ``admission``: the admission gate (None: ``[admission]`` off, every
        request admitted); ``parse_offload``: where bodies over its ``inline_limit`` bytes are parsed,
        off the event loop (None: always inline). A long body's parse waits its turn at the
        scheduler's ``turns`` gate (``gateway/turns.py``; none: never waits)."""
        self._selector = selector
        self._gate = gate
        self._closeout = closeout
        self._catalog = catalog
        self._registry = registry
        self._scheduler = scheduler
        self._metrics = metrics
        self._max_attempts = opener.max_attempts
        self._admission = admission
        self._clock = opener.clock
        self._sleep = opener.sleep
        self._parse_offload = parse_offload
        self._opener = opener
        self.turns: TurnGate | None = getattr(scheduler, "turns", None)

    async def handle(
        self, operation: Operation | ApiCall, headers: Mapping[str, str], raw: bytes, state: Any, watch: Watch,
        key: KeyRecord,
    ) -> tuple[Reply, dict[str, str]]:
        """Serve one inference request whose body ``raw`` was read by the edge (module doc, steps 1-6).

        ``headers``: lowercase names. ``state``: the request's state, with its ``request_id``
        (``state.trace`` is read; ``state.exchange`` is set). ``key``: the authenticated client key.
        ``watch``: awaits the forwarding step, raising ClientDisconnected if the client leaves.
        Returns the reply and the ``x-kvgate-*`` headers to add; the caller calls the reply's
        ``settle()`` once it has written a :class:`BufferedReply` (a relay ends itself).

        Raises:
            GatewayError: the OpenAI-shaped error to answer with (the exchange is finished).
            ClientDisconnected: the client left while the request was forwarded (finished as cancelled).
        """
        if type(operation) is ApiCall:
            return await self.apis.handle(operation, headers, raw, state, watch, key)
        check_content_type(headers.get("content-type"))
        check_content_encoding(headers.get("content-encoding"))
        turns = self.turns
        if turns is not None and len(raw) >= turns.min_bytes:
            await turns.turn(len(raw))  # heavy work bounded per loop turn (gateway/turns.py)
        offload = self._parse_offload
        if offload is None or len(raw) <= offload.inline_limit:
            parsed = parse_request(operation, raw)
        else:
            parsed = await offload.parse(operation, raw)  # the same request, the same errors, off the loop
        routed = await self._selector.select(parsed, key, headers)
        route = self.route_for(parsed, headers.get("x-failover-route"), routed.route)
        api = _API_ROWS[operation]  # one lookup: an Enum key's hash is a Python call
        if self.apis is not None:  # only clusters that generate (400 model_not_supported if none)
            route = self.apis.serving(route, api, parsed.model)
        selector = self._selector
        admission = await self._gate.admit(
            key, parsed.model, len(raw), route.clusters, lambda: selector.reservation(routed, route, len(raw))
        )
        exchange = self._closeout.open(state.request_id, parsed.model, admission, state, api.name)
        selector.attach(exchange, routed)
        try:
            if self._admission is not None:
                route = await self.admit(route, exchange, key.name, headers, routed, watch)
            reply = await watch(self.forward(routed.request, exchange, route))
        except (ClientDisconnected, GatewayError) as error:
            end_failed(exchange, error)
            raise
        return reply, route_headers(route, exchange)

    async def admit(
        self, route: Route, exchange: Exchange, key: str, headers: Mapping[str, str], routed: Routed, watch: Watch
    ) -> Route:
        """Admission (step 4, ``[admission]`` on): the route the request goes on now, after waiting in
        the gateway queue if it must (under ``watch``). ``key``: the client key's name; ``headers``:
        ``X-Priority`` (``interactive`` | ``batch``, as the key allows) is read here, never forwarded.

        A spill puts the target first (``reason=spill_saturated``); the admitted cluster's lease goes
        on ``exchange.lease`` (held until the exchange finishes and by each attempt; the last to let
        go tells the gate) and the wait on ``exchange.queued_s``.

        Raises:
            RateLimitError: (429) shed: the key's own waiter bound; ``Retry-After`` set.
            OverloadedError: (503) shed: nothing can take it within its wait limit; ``Retry-After`` set.
            ClientDisconnected: the client left while queued (removed from the queue at once).
        """
        gate = self._admission
        assert gate is not None
        ask = self.admission_ask(route, key, headers, routed)
        judgement = gate.now(ask)
        decision = judgement.decision
        if decision.action is Action.QUEUE:
            decision = await watch(gate.admit(ask, judgement))
            exchange.queued_s = decision.queued_s
        if decision.action is Action.SHED:
            raise decision.error()
        if decision.action is Action.SPILL:
            rest = tuple(name for name in route.clusters if name != decision.cluster)
            route = replace(route, clusters=(decision.cluster, *rest), reason="spill_saturated")
        exchange.lease = gate.lease(decision.cluster, key)
        return route

    @property
    def admission(self) -> AdmissionGate | None:
        """The admission gate (None: ``[admission]`` off); ``POST /admin/routing/explain`` judges with it."""
        return self._admission

    @staticmethod
    def admission_ask(route: Route, key: str, headers: Mapping[str, str], routed: Routed) -> Ask:
        """The admission question of a request of ``key`` on ``route`` (spill targets: ``spill_to`` still
        on the route; none under ``X-Failover-Route: false``)."""
        primary = route.clusters[0]
        view = routed.views.get(primary)
        return Ask(
            primary, key, headers.get("x-priority"), route.max_queue_wait_s,
            [name for name in route.spill_to if name in route.clusters], allow_spill=route.failover,
            budget_left_usd=routed.limits.budget_left_usd, known_wait_s=view.wait_s if view is not None else None,
        )

    def route_for(self, request: InferenceRequest, failover_header: str | None, selected: Route | None = None) -> Route:
        """The effective route: ``selected`` (route selection's) or the model's, then ``X-Failover-Route``.

        Raises ModelNotFoundError (404) or InvalidRequestError (400).
        """
        route = selected if selected is not None else self._catalog.resolve(request.model).route
        return failover.apply_failover_header(failover_header, route, self._catalog.routes)

    async def forward(
        self, request: InferenceRequest, exchange: Exchange, route: Route, prompt: InferenceRequest | None = None,
        pinned: Endpoint | None = None,
    ) -> Reply:
        """Send ``request`` along ``route`` to the first endpoint that answers (step 5).

        Another API's request (``gateway/api_director.py``) gives ``prompt``, the chat-shaped view
        the scheduler hashes, and ``pinned``: the one endpoint to try (state affinity), unscheduled.

        Raises:
            UpstreamClientError: the endpoint's own 4xx, relayed.
            UpstreamError, UpstreamTimeoutError, NoHealthyEndpointError: every attempt failed,
                or none could be made (502 / 504 / 503 with ``Retry-After``).
        """
        exchange.route, exchange.cluster = route.name, route.clusters[0]
        walk = _Walk(request, exchange, route, self._max_attempts if route.failover else 1)
        for cluster in route.clusters:
            endpoints = self._registry.cluster(cluster)
            if pinned is not None:
                decision = Decision([pinned])
                reply = await self._walk_cluster(walk, cluster, decision)
                if reply is not None:
                    return reply
                break
            if endpoints:
                decision = await self._scheduler.schedule(endpoints, request if prompt is None else prompt)
                reply = await self._walk_cluster(walk, cluster, decision)
                if reply is not None:
                    return reply
            if walk.budget == 0:
                break
        if walk.last is not None:
            raise walk.last.error
        raise self._unavailable(route, walk.retry_at)

    async def _walk_cluster(self, walk: _Walk, cluster: str, decision: Decision) -> Reply | None:
        """Attempts on the cluster's ranked endpoints until one answers (its reply) or none is left (None)."""
        for endpoint in decision.ranked:
            if walk.budget == 0:
                return None
            attempt = await self._take(walk, endpoint, decision)
            if attempt is None:
                continue
            walk.budget -= 1
            self._count(walk.exchange, cluster, endpoint, decision)
            try:
                return await self._attempt(attempt, walk)
            except Retry as retry:
                walk.failed(attempt, retry)
        return None

    async def _take(self, walk: _Walk, endpoint: Endpoint, decision: Decision) -> Attempt | None:
        """An attempt on ``endpoint`` if it may be tried now (after the Retry-After still to honour), else None."""
        if not _may_try(endpoint, walk.retry_at):
            return None
        if walk.wait_s:
            await self._sleep(walk.wait_s)
            walk.wait_s = 0.0
        if not endpoint.breaker.allow():  # its one half-open probe went to another request meanwhile
            walk.retry_at.append(endpoint.breaker.retry_at)
            return None
        return Attempt(endpoint, decision, self._metrics, walk.exchange.lease)

    def _count(self, exchange: Exchange, cluster: str, endpoint: Endpoint, decision: Decision) -> None:
        if exchange.attempts and exchange.cluster != cluster:
            self._metrics.failovers.labels(exchange.cluster, cluster).inc()
        exchange.cluster, exchange.endpoint, exchange.decision = cluster, endpoint.spec.name, decision
        exchange.attempts += 1

    async def _attempt(self, attempt: Attempt, walk: _Walk) -> Reply:
        """One attempt: a buffered answer (the attempt ends at ``settle``) or an open stream handed to a relay.

        Raises :class:`Retry` (the attempt still open: the caller ends it) or UpstreamClientError (ended here).
        """
        request, exchange, route = walk.request, walk.exchange, walk.route
        if type(request) is not InferenceRequest:  # another API: its own observer, usage and state
            return await request.open(self._opener, attempt, exchange, route)
        try:
            if not request.stream:
                return await self._opener.buffered(attempt, request, exchange, route)
            observer = StreamObserver(self._clock, collect=continuable(request) and route.failover)
            source = await self._opener.stream(attempt, request, exchange, route, observer)
        except Retry:
            raise
        except BaseException:  # the client's 4xx, a cancel (the client left), anything unforeseen
            attempt.abandoned()
            raise
        attempt.accepted()
        continuation = None
        if observer.collect:
            continuation = Continuation(self._opener, request, exchange, route, attempt.decision, self._metrics)
        return StreamRelay(
            source=source, observer=observer, exchange=exchange, idle_s=route.timeouts.idle_s,
            continuation=continuation, prompt_tokens=estimate_prompt_tokens(len(request.raw)),
            choices=_choices(request.body),
        )

    def _unavailable(self, route: Route, retry_at: list[float]) -> NoHealthyEndpointError:
        wait = max(1, math.ceil(min(retry_at) - self._clock())) if retry_at else 1
        names = ", ".join(route.clusters)
        return NoHealthyEndpointError(
            f"No endpoint of {names} can take requests now (circuit breakers open or rate-limit cooldowns); "
            f"retry in {wait} s.",
            headers={"Retry-After": str(wait)},
        )


def _choices(body: dict[str, Any]) -> int:
    """How many choices a chat or text completion streams (``n``, default 1)."""
    n = body.get("n")
    return n if type(n) is int and n >= 1 else 1


class _Walk:
    """The attempt loop's state for one request: what it forwards, what is left, what it saw."""

    __slots__ = ("request", "exchange", "route", "budget", "last", "retry_at", "wait_s")

    def __init__(self, request: InferenceRequest, exchange: Exchange, route: Route, budget: int) -> None:
        self.request, self.exchange, self.route = request, exchange, route
        self.budget = budget  # attempts left (``upstream.max_attempts``, one when failover is off)
        self.last: Retry | None = None  # the last failed attempt's
        self.retry_at: list[float] = []  # when the endpoints skipped (cooling, breaker open) may be tried
        self.wait_s = 0.0  # a Retry-After to honour before the next attempt, if one is made

    def failed(self, attempt: Attempt, retry: Retry) -> None:
        """End ``attempt`` on its :class:`Retry`; a 5xx repeating the previous one (status and message)
        is the body's fault, not the endpoints': the attempts stop (raises its error)."""
        last = self.last
        if retry.echo is not None and last is not None and retry.echo == last.echo:
            attempt.abandoned("repeated_" + retry.reason)
            raise retry.error from None
        attempt.retried(retry)
        self.last, self.wait_s = retry, retry.wait_s


def _may_try(endpoint: Endpoint, retry_at: list[float]) -> bool:
    """Neither cooling (a 429's Retry-After) nor refused by its breaker; else when it may be, into ``retry_at``."""
    cooling = endpoint.cooling_until
    if cooling:
        retry_at.append(cooling)
        return False
    if not endpoint.breaker.available():
        retry_at.append(endpoint.breaker.retry_at)
        return False
    return True


def end_failed(exchange: Exchange, error: ClientDisconnected | GatewayError) -> None:
    """End ``exchange`` for what was raised before its reply: a client that left is ``cancelled``;
    a GatewayError is a client error (4xx) or an upstream one (5xx), with its code and status."""
    if isinstance(error, ClientDisconnected):
        exchange.finish(CANCELLED)
        return
    exchange.error_type, exchange.status = error.code or str(error.status), error.status
    exchange.finish(CLIENT_ERROR if error.status < 500 else UPSTREAM_ERROR)


def route_headers(route: Route, exchange: Exchange) -> dict[str, str]:
    """The ``x-kvgate-*`` headers of an answer: the route with its reason, the cluster and endpoint that served it."""
    return {
        "x-kvgate-route": f"{route.name}; reason={route.reason}",
        "x-kvgate-cluster": exchange.cluster,
        "x-kvgate-endpoint": exchange.endpoint,
    }
