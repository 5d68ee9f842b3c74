"""The close-out: every end-of-request effect of one inference request, done once, in one place.

Whoever ends a request (the buffered writer through ``BufferedReply.settle``, the stream relay,
the director on an error, the edge on a cancel) calls :meth:`~gateway.exchange.Exchange.finish`
once; the exchange then calls :meth:`CloseOut.close`, which, in this order:

1. reads the answer's token usage (:class:`~gateway.keys.pricing.TokenUsage`, on ``exchange.tokens``)
   and prices it ONCE at the serving cluster's prices (USD);
2. writes the operations metrics: ``kvgate_request_errors_total`` by error class,
   ``kvgate_route_decisions_total``, ``kvgate_retries_total``, ``kvgate_cost_usd_total`` (and by
   endpoint, ``kvgate_endpoint_cost_usd_total``),
   ``kvgate_endpoint_request_duration_seconds`` and ``kvgate_time_per_output_token_seconds``
   (streams with usage and at least two output tokens);
3. queues the key's settlement (TPM correction, spend, usage record) on the :class:`KeyGate`;
4. ends the request's trace (usage on its spans) when tracing is on;
5. adds the per-request record (``observability/request_log.py``: id, API, key, model, route and
   reason, cluster, endpoint, attempts, prompt/cached/completion tokens, cost, TTFT, E2E, status,
   outcome), listed by ``GET /admin/requests``;
6. observes the load (route selection's load model and the key's cost,
   :meth:`~gateway.selection.selector.RouteSelector.finished`, given the cost of step 1);
7. writes the core request metrics: ``kvgate_requests_total``, ``kvgate_api_requests_total{api,
   model, outcome}``, the request duration, TTFT and token counters (``kvgate_tokens_total``, and
   ``kvgate_endpoint_tokens_total`` by the endpoint that answered).

The access-log line of an inference request is the edge's to time (it knows the status written
and when the last byte left): it calls :func:`access_line` with the exchange, on every door.

Every stream asks its endpoint for ``usage`` (the director adds ``stream_options.include_usage``
for a client that did not, and the relay strips it); a stream that still ends without it (an
endpoint refusing ``stream_options``, a broken stream) carries an estimate marked
``"estimated": true`` (``gateway/relay.py``), priced like measured usage. A stream that ends with
no usage at all (the client left before the end) costs nothing here, and its key keeps the
admission's reservation (estimated tokens and cost, ``gateway/keys/limits.py``) as its charge.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.exchange import CANCELLED, CLIENT_ERROR, SUCCESS, UPSTREAM_ERROR, Exchange
from gateway.keys.gate import Admission, KeyGate
from gateway.keys.pricing import Pricing, TokenUsage, cost_usd
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.request_log import RequestLog

if TYPE_CHECKING:
    from gateway.selection.selector import RouteSelector

access_log = logging.getLogger("kvgate.access")

_ERROR_OUTCOMES = frozenset({CLIENT_ERROR, UPSTREAM_ERROR})
_SERVED_OUTCOMES = frozenset({SUCCESS, CANCELLED})  # without usage: the reservation is the charge


class CloseOut:
    """One per app, built by ``create_app``. :meth:`close` runs on every request: keep it cheap."""

    __slots__ = ("_metrics", "_pricing", "_gate", "_log", "selector", "_clock")

    def __init__(
        self,
        metrics: GatewayMetrics,
        pricing: Pricing,
        gate: KeyGate,
        log: RequestLog | None = None,
        *,
        clock: Callable[[], float],
        selector: RouteSelector | None = None,
    ) -> None:
        self._metrics = metrics
        self._pricing = pricing
        self._gate = gate
        self._log = log
        self._clock = clock
        self.selector = selector  # the load observer (route selection's load model)

    def open(self, request_id: str, model: str, admission: Admission | None, state: Any, api: str = "chat") -> Exchange:
        """A new exchange that closes here, with the key's admission and the request's trace
        (``state.trace``, set by the edge when tracing is on); put on ``state.exchange``. ``api``:
        the API's name (``gateway/protocol/apis.py``), in the record and ``kvgate_api_requests_total``."""
        exchange = Exchange(request_id, model, self._clock, self, api)
        exchange.admission = admission
        trace = getattr(state, "trace", None)
        if trace is not None:
            trace.exchange = exchange
            exchange.trace = trace
        state.exchange = exchange
        return exchange

    def close(self, exchange: Exchange) -> None:
        """Every end-of-request effect of ``exchange`` (finished: outcome, usage, times set); see the module doc."""
        m, tally = self._metrics, self._metrics.tally
        model, cluster, outcome = exchange.model, exchange.cluster, exchange.outcome
        tokens = exchange.tokens
        cost = cost_usd(self._pricing.get(cluster), tokens) if tokens is not None and cluster else 0.0
        if outcome in _ERROR_OUTCOMES:
            tally.count(m.errors, (model, cluster, exchange.error_type or outcome))
        if cluster:
            tally.count(m.route_decisions, (model, exchange.route or cluster, cluster))
            if exchange.attempts > 1:
                tally.count(m.retries, (model, cluster), exchange.attempts - 1)
        if cost > 0:
            tally.count(m.cost_by, (model, cluster, exchange.endpoint), cost)  # by model and cluster, and by endpoint
        if outcome == SUCCESS:
            self._latencies(exchange, tokens)
        if exchange.admission is not None:
            served = tokens is None and outcome in _SERVED_OUTCOMES and exchange.attempts > 0
            self._gate.settle(exchange.admission, model, cluster, outcome == SUCCESS, tokens, cost, charge_estimate=served)
        if exchange.trace is not None:
            exchange.trace.finish(exchange, tokens, cost)
        if self._log is not None:
            self._log.add(exchange, tokens, cost)
        if self.selector is not None and exchange.selection is not None:
            self.selector.finished(exchange, cost)
        self._core_metrics(exchange)

    def _latencies(self, exchange: Exchange, tokens: TokenUsage | None) -> None:
        m = self._metrics
        if exchange.endpoint:
            m.tally.observe(m.endpoint_duration, (exchange.endpoint,), exchange.ended_at - exchange.started)
        first = exchange.first_token_at
        if first is not None and tokens is not None and tokens.output > 1:
            per_token = (exchange.ended_at - first) / (tokens.output - 1)
            m.tally.observe(m.time_per_output_token, (exchange.model, exchange.cluster), per_token)

    def _core_metrics(self, exchange: Exchange) -> None:
        m, tally = self._metrics, self._metrics.tally
        model, cluster, outcome = exchange.model, exchange.cluster, exchange.outcome
        tally.count(m.requests, (model, cluster, exchange.endpoint, outcome))
        tally.count(m.api_requests, (exchange.api, model, outcome))
        if outcome == CLIENT_ERROR and not cluster:
            return
        tally.observe(m.request_duration, (model, cluster), self._clock() - exchange.started)
        first = exchange.first_token_at
        if first is not None:
            tally.observe(m.ttft, (model, cluster), first - exchange.started)
        usage = exchange.usage
        if isinstance(usage, dict):
            self._count_tokens(model, cluster, exchange.endpoint, usage)

    def _count_tokens(self, model: str, cluster: str, endpoint: str, usage: dict[str, Any]) -> None:
        """``kvgate_tokens_total`` and, when an endpoint answered, ``kvgate_endpoint_tokens_total``: one
        folded count per kind for both (``GatewayMetrics.tokens_by``, split at the tally's flush)."""
        m = self._metrics
        prompt = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens")
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        count, tokens = m.tally.count, m.tokens_by  # unrolled: prompt, completion, cached (in that order)
        if isinstance(prompt, int) and prompt > 0:
            count(tokens, (model, cluster, endpoint, "prompt"), prompt)
        if isinstance(completion, int) and completion > 0:
            count(tokens, (model, cluster, endpoint, "completion"), completion)
        if isinstance(cached, int) and cached > 0:
            count(tokens, (model, cluster, endpoint, "cached"), cached)


def access_fields(
    exchange: Exchange | None, *, request_id: str | None, method: str | None, path: str | None, status: int,
    duration_s: float,
) -> dict[str, Any]:
    """The access-log fields of a finished request (pure): who, where it went, how it ended, tokens.

    ``exchange``: the request's (``state.exchange``), or None when none was made (e.g. a 401).
    ``duration_s``: seconds, from the edge's start to the last byte written (``duration_ms`` in the line).
    """
    fields: dict[str, Any] = {
        "request_id": request_id, "method": method, "path": path, "status": status,
        "duration_ms": round(duration_s * 1000, 3),
    }
    if exchange is not None:
        fields.update(
            model=exchange.model, route=exchange.route or None, cluster=exchange.cluster or None,
            endpoint=exchange.endpoint or None, outcome=exchange.outcome, attempts=exchange.attempts,
        )
        if exchange.admission is not None:
            fields["key_id"] = exchange.admission.key.id
        queued = getattr(exchange, "queued_s", 0.0)
        if queued:
            fields["queue_ms"] = round(queued * 1000, 3)  # waited in the admission queue
        tokens = exchange.tokens
        if tokens is not None:
            fields.update(input_tokens=tokens.input, cached_tokens=tokens.cached, output_tokens=tokens.output)
    return fields


def access_line(
    exchange: Exchange | None, *, request_id: str | None, method: str, path: str, status: int, duration_s: float,
    extra: dict[str, Any] | None = None,
) -> None:
    """Write the request's JSON access-log line (logger ``kvgate.access``, INFO): :func:`access_fields`
    plus ``extra`` (e.g. ``request_body``/``response_body`` with ``logging.log_payloads``). Never raises on its own."""
    fields = access_fields(exchange, request_id=request_id, method=method, path=path, status=status, duration_s=duration_s)
    if extra:
        fields.update(extra)
    access_log.info("%s %s %d", method, path, status, extra={"fields": fields})
