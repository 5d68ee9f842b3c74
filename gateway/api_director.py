"""The director of every API but chat and text completions: Responses, Messages, embeddings, rerank, score.

:meth:`gateway.proxy.Proxy.handle` hands an :class:`~gateway.protocol.apis.ApiCall` (the edge found
its row in :mod:`gateway.protocol.apis`) to :meth:`ApiDirector.handle`, which takes the same spine
as chat: parse once (the row's ``parse``; off the loop above ``[server] parse_offload_bytes``:
``ParseOffload.parse_api``), route selection over the request's chat-shaped
``prompt`` (a model-only view when the API has none), ``X-Failover-Route``, the key's quotas, the
exchange and its close-out, admission, then :meth:`Proxy.forward <gateway.proxy.Proxy.forward>`
(scheduling over the prompt, failover before the first byte). What differs per API:

* **clusters**: a row that ``serves = "pooling"`` (embeddings, rerank, score) goes only to clusters
  whose ``[clusters.NAME] serves = "pooling"``; the others only to ``generate`` clusters
  (400 ``model_not_supported`` naming the API and what the model serves; chat and completions
  are checked by the same :meth:`ApiDirector.serving`);
* **the endpoint's answer**: sent to ``base_url + apis.upstream_path(path)`` with the client's query
  string, by the row's method; never asked for usage (``stream_options`` is chat's);
* **usage**: a buffered answer's by the row's ``usage`` reader, a stream's by the row's observer
  (normalized to OpenAI's shape, so the close-out prices cached tokens at the cached price as for
  chat); a stream broken after content ends with the API's own error event; never continued;
* **state affinity** (Responses): a request with a ``state_id`` (``previous_response_id``, an
  encrypted reasoning item, or ``GET``/``cancel``/``DELETE`` of ``/v1/responses/{id}``) goes to
  the endpoint recorded for it (:mod:`gateway.state.response_affinity`), alone, with no failover:
  another endpoint lacks the history. It being gone, unhealthy, draining or failing is a 503
  ``stored_response_unavailable`` naming the cause; no record is a 404 ``response_not_found``.
  The id of every stored answer is recorded -> its endpoint before the client sees it (a buffered
  200, or a stream's ``response.created``), so the next turn, on any replica sharing the store,
  finds it.

Errors are rendered by the edge in the row's shape (Anthropic's on ``/v1/messages``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from gateway.attempt import Attempt, BufferedReply, Opener, Retry
from gateway.background_usage import BackgroundUsage
from gateway.errors import (
    GatewayError,
    InvalidRequestError,
    MethodNotAllowedError,
    ModelNotSupportedError,
    NoHealthyEndpointError,
    UpstreamClientError,
    UpstreamError,
    UpstreamTimeoutError,
)
from gateway.exchange import Exchange
from gateway.proxy import end_failed, route_headers
from gateway.keys.limits import estimate_prompt_tokens
from gateway.keys.model import KeyRecord
from gateway.keys.table import ANONYMOUS
from gateway.protocol import responses
from gateway.protocol.api_request import ApiRequest
from gateway.protocol.apis import Api, ApiCall
from gateway.protocol.openai import InferenceRequest, Operation
from gateway.protocol.typed_events import openai_usage
from gateway.protocol.validation import check_content_encoding, check_content_type
from gateway.relay import ClientDisconnected, StreamRelay
from gateway.selection.route import Route
from gateway.state.response_affinity import (
    ResponseAffinity,
    StoredResponseReadError,
    StoredResponseUnavailableError,
    entry,
    resolve,
)

if TYPE_CHECKING:
    from gateway.config import Settings
    from gateway.endpoints.model import Endpoint
    from gateway.proxy import Proxy, Reply, Watch

_BROKEN = (UpstreamError, UpstreamTimeoutError, NoHealthyEndpointError)
_PENDING: set[asyncio.Future[None]] = set()  # records written after a stream's end (kept from the GC)

log = logging.getLogger("kvgate.apis")


@dataclass(slots=True, eq=False)
class _Target:
    path: str  # what ``Opener`` appends to the endpoint's ``base_url`` (``operation.path``)


class Outgoing:
    """What the :class:`~gateway.attempt.Opener` sends for another API's request (quacks like the
    :class:`~gateway.protocol.openai.InferenceRequest` it reads: ``operation.path``, ``stream``,
    ``wants_usage``, ``raw``, ``body_for``), and how one attempt on it is opened (:meth:`open`)."""

    __slots__ = ("api", "request", "operation", "method", "stream", "raw", "wants_usage", "_affinity", "recorded",
                 "_background", "_owner")

    def __init__(self, call: ApiCall, request: ApiRequest, affinity: ResponseAffinity | None,
                 background: BackgroundUsage | None = None, owner: str | None = None) -> None:
        self.api: Api = call.api
        self.request = request
        self.operation = _Target(call.upstream_path)
        self.method = call.api.method
        self.stream = request.stream
        self.raw = request.raw
        self.wants_usage = True  # never add ``stream_options``: it is chat's and completions'
        self._affinity = affinity
        self._background = background
        self._owner = owner  # the creating key's id, recorded with each stored id (None: no keys)
        self.recorded: list[str] = []

    def body_for(self, served_model: str, ask_usage: bool = False) -> bytes:
        """The bytes sent to an endpoint serving ``served_model`` (``ask_usage`` is ignored)."""
        del ask_usage
        return self.request.body_for(served_model)

    def _settle_background(self, body: bytes) -> None:
        """Settle a background response this read shows ended; its close-out never fails this read."""
        assert self._background is not None
        try:
            self._background.offer(_json(body))
        except Exception:  # the client's retrieve got its 200; the poller or the reservation still charges
            log.exception("background usage: settling %s from a read failed", self.request.state_id)

    async def open(self, opener: Opener, attempt: Attempt, exchange: Exchange, route: Route) -> Reply:
        """One attempt (the director's ``_attempt`` for this API): a buffered reply read by the
        row's usage reader, or a relay watched by the row's observer; stored ids recorded first.

        Raises :class:`~gateway.attempt.Retry` (the attempt still open) or UpstreamClientError (ended here).
        """
        api = self.api
        attempt.blameless = api.state == "reads"  # a stored response's read: its failure is this request's
        try:
            if not self.stream or api.observer is None:
                reply = await opener.buffered(attempt, self, exchange, route)  # type: ignore[arg-type]
                reply.reader = self._usage
                if reply.status == 200 and api.state == "creates":
                    await self._record_buffered(reply, attempt.endpoint)
                elif reply.status == 200 and self._background is not None and self.request.state_id in self._background:
                    self._settle_background(reply.body)  # a retrieve or cancel shows the end first
                return reply
            observer = api.observer(opener.clock)
            source = await opener.stream(attempt, self, exchange, route, observer)  # type: ignore[arg-type]
            if api.state == "creates" and observer.response_id and responses.stores(self.request):
                await self._record([observer.response_id], attempt.endpoint.spec.name)
        except Retry as retry:
            if not attempt.blameless:
                raise
            attempt.abandoned(retry.reason)
            raise _read_failed(self.request, attempt.endpoint.spec.name, retry, self.stream) from None
        except UpstreamClientError as error:
            attempt.abandoned()
            if error.status != 405:
                raise
            raise _not_served(self, attempt.endpoint.spec.name, error) from None
        except BaseException:
            attempt.abandoned()
            raise
        attempt.accepted()
        relay = StreamRelay(
            source=source, observer=observer, exchange=exchange, idle_s=route.timeouts.idle_s,  # type: ignore[arg-type]
            prompt_tokens=estimate_prompt_tokens(len(self.raw)),
        )
        if api.state == "creates" and self._affinity is not None:
            endpoint = attempt.endpoint.spec.name
            relay.on_success = lambda seen: self._record_later(getattr(seen, "response", None), endpoint)
        return relay

    def _usage(self, body: bytes) -> dict[str, Any] | None:
        """A buffered answer's usage in OpenAI's shape (what the close-out reads), or None."""
        try:
            parsed = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        tokens = self.api.usage(parsed)
        return None if tokens is None else openai_usage(tokens)

    async def _record_buffered(self, reply: BufferedReply, endpoint: Endpoint) -> None:
        """Record the answer's ids; a background one still running keeps its exchange open for
        :class:`~gateway.background_usage.BackgroundUsage` (settled with its real usage)."""
        parsed = _json(reply.body)
        if parsed is None:
            return
        await self._record(responses.ids_to_record(self.request, parsed), endpoint.spec.name)
        background = self._background
        if background is not None and responses.runs_in_background(self.request, parsed) and reply.exchange is not None:
            background.watch(parsed["id"], reply.exchange, endpoint)
            reply.exchange = None  # settle() ends the attempt only; the exchange ends with the response

    def _record_later(self, response: Any, endpoint: str) -> None:
        """At a stream's end: record the ids of its terminal response not recorded yet (its
        encrypted reasoning items), in a task (the stream's end is not awaited)."""
        ids = [rid for rid in responses.ids_to_record(self.request, response) if rid not in self.recorded]
        if ids:
            task = asyncio.ensure_future(self._record(ids, endpoint))
            _PENDING.add(task)
            task.add_done_callback(_PENDING.discard)

    async def _record(self, ids: list[str], endpoint: str) -> None:
        """Record ``ids`` -> ``endpoint``; a store failure is the store's to count: the answer stands."""
        if self._affinity is None:
            return
        for response_id in ids:
            try:
                await self._affinity.record(response_id, entry(endpoint, self._owner))
            except GatewayError:
                continue
            self.recorded.append(response_id)


def _json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


class ApiDirector:
    """Directs every :class:`ApiCall` (see the module doc). One per app, on ``Proxy.apis``.

    ``settings``: the current settings (``[clusters.NAME] serves`` is read per request, so a
    reload applies); ``affinity``: where stored responses are recorded (None: Responses are
    routed like any request and a ``state_id`` is a 404).
    """

    __slots__ = ("_proxy", "_settings", "_affinity", "background", "_served")

    def __init__(self, proxy: Proxy, settings: Callable[[], Settings], affinity: ResponseAffinity | None,
                 background: BackgroundUsage | None = None) -> None:
        self._proxy = proxy
        self._settings = settings
        self._affinity = affinity
        self.background = background  # background Responses, settled when they end (None: at the create)
        # the last answer of :meth:`serving`: (the settings' clusters, the route, the API's kind, the route kept);
        # a public model's route is the same object request after request, and settings are swapped, never changed
        self._served: tuple[Any, Any, str, Any] = (None, None, "", None)

    async def handle(
        self, call: ApiCall, headers: Mapping[str, str], raw: bytes, state: Any, watch: Watch, key: KeyRecord
    ) -> tuple[Reply, dict[str, str]]:
        """As :meth:`gateway.proxy.Proxy.handle`, for ``call``'s API (same errors, same exchange)."""
        proxy = self._proxy
        if raw:
            check_content_type(headers.get("content-type"))
            check_content_encoding(headers.get("content-encoding"))
        turns = proxy.turns
        if turns is not None and len(raw) >= turns.min_bytes:
            await turns.turn()  # one heavy step per loop turn (gateway/turns.py)
        offload = proxy._parse_offload
        if offload is not None and call.ident is None and len(raw) > offload.inline_limit:
            request = await offload.parse_api(call.api.name, raw)  # as chat: a large body off the loop
        else:
            request = call.api.parse(raw, call.ident)
        assert isinstance(request, ApiRequest)
        if call.api.name == responses.RETRIEVE and responses.streamed(call.query):
            request.stream = True  # ``?stream=true``: relayed as it comes, as a create's stream
        owner = None if key is ANONYMOUS else key.id
        pinned = await self._pinned(request, owner) if request.state_id is not None else None
        view = request.prompt if request.prompt is not None else self._model_view(request, pinned, key)
        selector = proxy._selector
        try:
            routed = await selector.select(view, key, headers)
        except InvalidRequestError as error:
            raise _own_fields(error, call.api) from None
        route = proxy.route_for(view, headers.get("x-failover-route"), routed.route)
        route = self.serving(route, call.api, view.model) if pinned is None else _pinned_route(route, pinned)
        admission = await proxy._gate.admit(
            key, view.model, len(raw), route.clusters, lambda: selector.reservation(routed, route, len(raw))
        )
        exchange = proxy._closeout.open(state.request_id, view.model, admission, state, call.api.name)
        selector.attach(exchange, routed)
        outgoing = Outgoing(call, request, self._affinity, self.background, owner)
        try:
            if proxy._admission is not None and pinned is None:  # a stored response's endpoint is never spilled from
                route = await proxy.admit(route, exchange, key.name, headers, routed, watch)
            reply = await watch(self._forward(outgoing, view, exchange, route, pinned))
        except (ClientDisconnected, GatewayError) as error:
            end_failed(exchange, error)
            raise
        return reply, route_headers(route, exchange)

    async def _forward(
        self, outgoing: Outgoing, view: InferenceRequest, exchange: Exchange, route: Route, pinned: Endpoint | None
    ) -> Reply:
        """The director's attempts; on a pinned endpoint a failure is the stored state's unavailability."""
        try:
            return await self._proxy.forward(outgoing, exchange, route, view, pinned)  # type: ignore[arg-type]
        except _BROKEN as error:
            if pinned is None:
                raise
            raise _unavailable(outgoing.request, pinned.spec.name, error.message) from None

    async def _pinned(self, request: ApiRequest, owner: str | None) -> Endpoint:
        """The endpoint holding ``request.state_id`` for the key ``owner`` (404 / 503 from ``resolve`` otherwise)."""
        assert request.state_id is not None
        registry = self._proxy._registry
        if self._affinity is None:
            raise _unavailable(request, "unknown", "no response store is configured")

        def unavailable(name: str) -> str | None:
            endpoint = registry.find(name)
            if endpoint is None:
                return "not in any cluster"
            if endpoint.draining:
                return "draining"
            if not endpoint.breaker.available():
                return "circuit open"
            if not endpoint.routable:
                return "unhealthy"
            return None

        name = await resolve(self._affinity, request.state_id, responses.state_param(request), unavailable, owner)
        endpoint = registry.find(name)
        assert endpoint is not None
        return endpoint

    def _model_view(self, request: ApiRequest, pinned: Endpoint | None, key: KeyRecord) -> InferenceRequest:
        """The view route selection reads for a request with no prompt (pooling, count_tokens, a
        stored response): its model, no messages. A stored response names no model: the first
        public name the key may use whose primary cluster holds the endpoint (else that cluster)."""
        model = request.model
        if not model and pinned is not None:
            cluster = pinned.spec.cluster
            model = next(
                (entry.id for entry in self._proxy._catalog.entries()
                 if entry.cluster == cluster and key.limits.allows(entry.id, entry.alias_of)),
                cluster,
            )
        return InferenceRequest(Operation.CHAT, model, False, {"model": model, "messages": []}, request.raw)

    def serving(self, route: Route, api: Api, model: str) -> Route:
        """``route`` with only the clusters that serve ``api`` (``generate`` or ``pooling``); chat and
        completions are checked here too (``Proxy.handle``), before the key's quota is touched.

        Raises ModelNotSupportedError (400 ``model_not_supported``, ``param: model``) naming the API
        and the model when none of its clusters serves the API.
        """
        clusters = self._settings().clusters
        serves = api.serves
        last = self._served
        if last[0] is clusters and last[1] is route and last[2] == serves:  # the same route as the last request's
            return last[3]
        kept = tuple(name for name in route.clusters if _serves(clusters.get(name)) == serves)
        if kept == route.clusters:
            self._served = (clusters, route, serves, route)
            return route
        if not kept:
            what = "embeddings, rerank and score only" if api.serves == "generate" else "text generation only"
            raise ModelNotSupportedError(
                f"The model `{model}` serves {what}: the {api.name} API ({api.method} {api.paths[0]}) is not "
                f"supported for it.", param="model"
            )
        served = dataclasses.replace(route, clusters=kept,  # spill targets only among the clusters kept
                                     spill_to=tuple(name for name in route.spill_to if name in kept))
        self._served = (clusters, route, serves, served)
        return served


_PROMPT_FIELD = {responses.CREATE: "input"}  # the API's own name for what chat calls ``messages``


def _own_fields(error: InvalidRequestError, api: Api) -> InvalidRequestError:
    """A selection error (``context_length_exceeded``) naming the API's own fields, not chat's."""
    field = _PROMPT_FIELD.get(api.name)
    if field is None or error.param != "messages":
        return error
    error.param = field
    error.message = error.message.replace("the messages", f"the {field}")
    error.args = (error.message,)
    return error


def _serves(cluster: Any) -> str:
    return getattr(cluster, "serves", "generate") if cluster is not None else "generate"




def _pinned_route(route: Route, pinned: Endpoint) -> Route:
    """The one-cluster, no-failover route to the endpoint holding the state."""
    return Route(route.name, (pinned.spec.cluster,), failover=False, reason="response_affinity", timeouts=route.timeouts)


def _not_served(outgoing: Outgoing, endpoint: str, error: UpstreamClientError) -> MethodNotAllowedError:
    """An endpoint's 405 (vLLM 0.32 has no ``DELETE /v1/responses/{id}``), with its ``Allow``."""
    allowed = error.headers.get("Allow")
    path = "/v1" + outgoing.operation.path.split("?", 1)[0]
    return MethodNotAllowedError(
        f"Endpoint '{endpoint}' does not serve {outgoing.method} {path}"
        + (f"; it allows: {allowed}." if allowed else "."),
        headers={"Allow": allowed} if allowed else None,
    )


def _read_failed(request: ApiRequest, endpoint: str, retry: Retry, stream: bool) -> GatewayError:
    """The error of a failed read of a stored response (retrieve, cancel, delete): never retried
    elsewhere, never the breaker's (health checks catch a dead endpoint).

    * not reached (refused, timed out): 503 ``stored_response_unavailable`` (the state is there only);
    * a streamed retrieve whose stream broke before any event: 400 ``stream_not_available``, vLLM
      0.32 answers 200 and cuts the body when the response was not created with
      ``background: true, stream: true``;
    * the endpoint's own 5xx: that status, its message (``upstream_error``); a 429: relayed;
    * any other broken answer: 502 ``upstream_error``.
    """
    reason, error = retry.reason, retry.error
    if reason in ("connect", "timeout"):
        return _unavailable(request, endpoint, error.message.rstrip("."))
    if reason == "http_429":
        return error
    if stream and reason in ("broken_body", "empty_body", "stream_error"):
        return StoredResponseReadError(
            f"Endpoint '{endpoint}' cannot stream response '{request.state_id}': it streams a retrieve only of a "
            "response created with background=true and stream=true. Retrieve it without stream=true.",
            status=400, param="stream",
        )
    status = int(reason[5:]) if reason.startswith("http_") and reason[5:].isdigit() else 502
    return StoredResponseReadError(error.message, status=status if status >= 500 else 502)


def _unavailable(request: ApiRequest, endpoint: str, why: str) -> StoredResponseUnavailableError:
    return StoredResponseUnavailableError(
        f"Response '{request.state_id}' is stored on endpoint '{endpoint}', which is unavailable ({why}); "
        "its stored state is only there. Retry later, or start again without it.",
        param=responses.state_param(request),
    )
