"""What happens when an inference exchange ends, beyond its core metrics: cost, key usage, spans.

``Exchange.finish`` (``gateway/exchange.py``) calls :meth:`ExchangeRecorder.finished` once per
request, for successes, errors and cancels alike, including streams (called by the relay when
the stream ends). It:

1. reads the answer's token usage (:class:`~gateway.keys.pricing.TokenUsage`) and prices it at
   the serving cluster's prices;
2. writes the operations metrics: ``kvgate_request_errors_total`` by error class,
   ``kvgate_cost_usd_total``, ``kvgate_time_per_output_token_seconds`` (streams with usage and
   at least two output tokens), ``kvgate_endpoint_request_duration_seconds``,
   ``kvgate_route_decisions_total`` and ``kvgate_retries_total``;
3. queues the key's settlement (TPM correction, spend, usage record) on the :class:`KeyGate`;
4. puts usage on the request's spans when tracing is on;
5. adds the request to the per-request record (``observability/request_log.py``), when given one.

Every stream asks its endpoint for ``usage`` (the proxy adds ``stream_options.include_usage``
for a client that did not, and the relay strips it); a stream that still ends without it (an
endpoint refusing ``stream_options``, a broken stream) carries an estimate marked
``"estimated": true`` (``gateway/relay.py``), priced like measured usage. A stream
that ends with no usage at all (the client left before the end) costs nothing in the metrics
here, and its key keeps the admission's reservation (estimated tokens and cost,
``gateway/keys/limits.py``) as its charge.
"""

from __future__ import annotations

from typing import Any

from gateway.keys.gate import KeyGate
from gateway.keys.pricing import Pricing, TokenUsage, cost_usd
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.request_log import RequestLog

_ERROR_OUTCOMES = frozenset({"client_error", "upstream_error"})
_SERVED_OUTCOMES = frozenset({"success", "cancelled"})  # without usage: the reservation is the charge


class ExchangeRecorder:
    """One per app. ``finished`` must stay cheap: it runs on every request."""

    def __init__(self, metrics: GatewayMetrics, pricing: Pricing, gate: KeyGate, log: RequestLog | None = None) -> None:
        self._metrics = metrics
        self._pricing = pricing
        self._gate = gate
        self._log = log

    def finished(self, exchange: Any) -> None:
        m = self._metrics
        model, cluster, outcome = exchange.model, exchange.cluster, exchange.outcome
        tokens = exchange.tokens
        cost = cost_usd(self._pricing.get(cluster), tokens) if tokens is not None and cluster else 0.0
        if outcome in _ERROR_OUTCOMES:
            m.errors.labels(model, cluster, exchange.error_type or outcome).inc()
        if cluster:
            m.route_decisions.labels(model, getattr(exchange, "route", "") or cluster, cluster).inc()
            attempts = getattr(exchange, "attempts", 0) or 0
            if attempts > 1:
                m.retries.labels(model, cluster).inc(attempts - 1)
        if cost > 0:
            m.cost.labels(model, cluster).inc(cost)
        if outcome == "success":
            self._latencies(exchange, tokens)
        if exchange.admission is not None:
            served = tokens is None and outcome in _SERVED_OUTCOMES and (getattr(exchange, "attempts", 0) or 0) > 0
            self._gate.settle(exchange.admission, model, cluster, outcome == "success", tokens, cost, charge_estimate=served)
        trace = exchange.trace
        if trace is not None:
            trace.finish(exchange, tokens, cost)
        if self._log is not None:
            self._log.add(exchange, tokens, cost)

    def _latencies(self, exchange: Any, tokens: TokenUsage | None) -> None:
        m = self._metrics
        if exchange.endpoint:
            m.endpoint_duration.labels(exchange.endpoint).observe(exchange.ended_at - exchange.started)
        first = exchange.first_token_at
        if first is not None and tokens is not None and tokens.output > 1:
            per_token = (exchange.ended_at - first) / (tokens.output - 1)
            m.time_per_output_token.labels(exchange.model, exchange.cluster).observe(per_token)
