"""Every Prometheus instrument of the gateway, defined once, on a per-app registry.

Names follow Prometheus conventions (base units: seconds, ``_total`` for counters) and, where
they exist, OpenTelemetry's GenAI semantic conventions for the meaning of each figure
(``gen_ai.server.time_to_first_token``, ``gen_ai.client.token.usage``).

OpenTelemetry GenAI names of the figures (Prometheus keeps kvgate's names and labels):
    ``kvgate_request_duration_seconds`` ~ ``gen_ai.server.request.duration``;
    ``kvgate_time_to_first_token_seconds`` ~ ``gen_ai.server.time_to_first_token``;
    ``kvgate_time_per_output_token_seconds`` ~ ``gen_ai.server.time_per_output_token`` (ITL);
    ``kvgate_tokens_total{kind}`` ~ ``gen_ai.client.token.usage`` (``gen_ai.token.type`` input /
    output; ``cached`` = ``gen_ai.usage.cache_read.input_tokens``);
    ``kvgate_request_errors_total{error_type}`` carries ``error.type``;
    ``kvgate_api_requests_total{api, model, outcome}`` ~ ``gen_ai.operation.name`` (``chat``, ``completions``,
    ``responses``, ``messages``, ``embeddings``, ...: ``gateway/protocol/apis.py``; a counter of its own, so the
    label sets of ``kvgate_requests_total`` and the dashboards over it stay as they were).

Request outcomes (label ``outcome``):
    ``success``: the endpoint answered 2xx and, for streams, finished without an in-band error.
    ``client_error``: the request was refused (4xx from kvgate or passed through from an endpoint).
    ``upstream_error``: the endpoint failed (connect, 5xx, timeout, broken or in-band error stream).
    ``cancelled``: the client disconnected first (never counted against the endpoint).

``kvgate_endpoint_tokens_total{endpoint, kind}`` and ``kvgate_endpoint_cost_usd_total{endpoint}``: the tokens and
cost of ``kvgate_tokens_total``/``kvgate_cost_usd_total`` by the endpoint that answered (a continued stream's last).

The scheduling framework's instruments (:class:`RoutingMetrics`):
    - ``kvgate_routing_producer_failures_total{producer, reason}``: a producer timed out or failed;
      its hint was dropped and the request was scheduled without it.
    - ``kvgate_routing_hot_spot_diversions_total{cluster}``: the hot-spot guard moved a request off
      the endpoint with the longest cached prefix.
    - ``kvgate_prefix_predictions_total{endpoint, outcome}``: predicted vs reported cached tokens of
      finished requests: ``exact`` (within one engine block), ``over`` or ``under``.
    - ``kvgate_prefix_prediction_accuracy{endpoint, source}``: 1 - |predicted - reported| / prompt
      tokens, EWMA per request (``source="usage"``) or per scrape window from the engine's prefix
      counters (``source="counters"``).
    - ``kvgate_prefix_index_capacity_blocks{endpoint}``: the index capacity the closed loop applies.
    - ``kvgate_state_degraded``: 1 while the shared state store is bypassed (local view), else 0.
    - ``kvgate_state_fallbacks_total{reason}``: shared-store calls that fell back (timeout, error).
    - ``kvgate_engine_scrape_failures_total{endpoint}``, ``kvgate_engine_restarts_total{endpoint}``.
    - ``kvgate_kv_event_batches_total{endpoint, outcome}`` (precise mode: ``applied``, ``gap``, ``restart``)
      and ``kvgate_kv_event_dropped_total{reason}`` (``unknown_topic``, ``malformed``).

Admission's instruments (:class:`AdmissionMetrics`; only with ``[admission] enabled``):
    ``kvgate_admission_decisions_total{cluster, action, reason}`` (admit: ``free``/``queued``; spill:
    ``spill_saturated``, cluster = the target; shed: ``shed_capacity`` 503, ``shed_key_limit`` 429),
    ``kvgate_admission_queue_depth{cluster, priority}`` (scrape time), ``kvgate_admission_queue_wait_seconds
    {cluster, priority}``, ``kvgate_admission_admitted_total{cluster, key}`` and ``kvgate_admission_key_share
    {cluster, key}`` (scrape time: the key's share of the cluster's admissions since start, the fairness share).

Route selection's instruments (:class:`RouteMetrics`):
    * ``kvgate_route_selections_total{model, cluster, reason}``: one per selected request, by the
      public name the client sent, the primary cluster chosen and the policy's reason
      (``needs_reasoning``, ``light``, ``downgrade_ttft``, ``downgrade_cost``, ``downgrade_budget``,
      ``upgrade_saturated``, ``upgrade_ttft``, ``unavailable``, ``context_fit``, ``tier``, or a
      pinned model's route reason ``model``/``route``/``cluster``). Every downgrade and upgrade is
      counted here. (``kvgate_route_decisions_total{model, route, cluster}``, the route mix of
      finished requests, is :class:`GatewayMetrics`' ``route_decisions``.)
    * ``kvgate_route_context_rejections_total{model}``: requests refused with 400
      ``context_length_exceeded`` before any upstream call.
    * ``kvgate_key_cost_usd_total{key, model, cluster}``: the cost of answered requests by key name
      (``kvgate_cost_usd_total`` has no key label), priced as ``keys/pricing.py`` says: uncached
      input, cached input and output tokens each at the cluster's own price.
    * ``kvgate_route_classifier_seconds``: time to read the signals of a request routed by ``auto`` (features and classifier).
    * At scrape time, per tiered cluster: ``kvgate_cluster_predicted_ttft_seconds``,
      ``kvgate_cluster_load`` and ``kvgate_cluster_error_rate`` (``selection/load.py``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Metric, generate_latest, multiprocess
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway.observability.tally import Split, Tally

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_LOOP_LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


def cache_children(instrument: Counter | Gauge | Histogram, size: int = 4096) -> None:
    """Memoize ``instrument.labels(...)``: prometheus_client validates and locks on every call
    (about 2 us; a request makes ~10 such calls). Children are never removed from kvgate's
    instruments, so a cached child is always the live one. Bounded LRU (``size`` children)."""
    instrument.labels = functools.lru_cache(maxsize=size)(instrument.labels)  # type: ignore[method-assign]


class GatewayMetrics:
    """The gateway's instruments on ``registry`` (a fresh one per app by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        self.tally = Tally(self.registry, direct=bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR")))  # observability/tally.py
        self._scrape_collectors: list[Collector] = []
        self.before_scrape: list[Callable[[], None]] = []  # run before each exposition (plain-int tallies flush)
        r = self.registry
        self.requests = Counter(
            "kvgate_requests", "Inference requests by public model, cluster, endpoint and outcome.",
            ["model", "cluster", "endpoint", "outcome"], registry=r,
        )
        self.request_duration = Histogram(
            "kvgate_request_duration_seconds", "E2E latency of inference requests as the gateway saw it, seconds.",
            ["model", "cluster"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.ttft = Histogram(
            "kvgate_time_to_first_token_seconds", "Time from request arrival to the first streamed token, seconds.",
            ["model", "cluster"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.tokens = Counter(
            "kvgate_tokens", "Tokens by kind: prompt, cached (prompt tokens served from the prefix cache), completion.",
            ["model", "cluster", "kind"], registry=r,
        )
        self.upstream_failures = Counter(
            "kvgate_upstream_failures", "Failed attempts against an endpoint, by reason.", ["endpoint", "reason"], registry=r
        )
        self.api_requests = Counter(
            "kvgate_api_requests", "Inference requests by API, public model and outcome.", ["api", "model", "outcome"],
            registry=r,
        )
        self.failovers = Counter(
            "kvgate_failovers", "Requests that moved from one cluster of their route to the next, before the first byte.",
            ["from_cluster", "to_cluster"], registry=r,
        )
        self.continuations = Counter(
            "kvgate_stream_continuations",
            "Streams broken after content was sent and continued on another endpoint of the cluster.", ["cluster"], registry=r,
        )
        self.in_flight = Gauge(
            "kvgate_endpoint_in_flight", "Requests in flight to an endpoint from this gateway (summed over its processes).",
            ["endpoint"], registry=r, multiprocess_mode="livesum",
        )
        self.healthy = Gauge(
            "kvgate_endpoint_healthy", "1 if the endpoint is routable and its last check passed, else 0 (with several "
            "processes: the lowest of their views).", ["endpoint"], registry=r, multiprocess_mode="livemin",
        )
        self._add_operations_instruments(r)
        self._add_loop_lag_instruments(r)
        for instrument in vars(self).values():
            if isinstance(instrument, (Counter, Gauge, Histogram)) and instrument._labelnames:
                cache_children(instrument)

    def _add_operations_instruments(self, r: CollectorRegistry) -> None:
        """Errors, cost, per-token latency, quotas and the state store (issue 5)."""
        self.errors = Counter(
            "kvgate_request_errors", "Failed inference requests by error class (OTel error.type: the OpenAI error code, "
            "or the HTTP status).", ["model", "cluster", "error_type"], registry=r,
        )
        self.time_per_output_token = Histogram(
            "kvgate_time_per_output_token_seconds",
            "Inter-token latency: (E2E - TTFT) / (output tokens - 1) per streamed request "
            "(gen_ai.server.time_per_output_token), seconds.",
            ["model", "cluster"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5),
            registry=r,
        )
        self.endpoint_duration = Histogram(
            "kvgate_endpoint_request_duration_seconds", "E2E latency of successful requests by the endpoint that answered, seconds.",
            ["endpoint"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.cost = Counter(
            "kvgate_cost_usd", "Cost of answered requests at the cluster's prices, USD.", ["model", "cluster"], registry=r
        )
        self.endpoint_tokens = Counter(  # the endpoint rows of /admin/stats (kvgate_tokens has no endpoint label)
            "kvgate_endpoint_tokens", "Tokens by the endpoint that served them and kind (prompt, cached, completion).",
            ["endpoint", "kind"], registry=r,
        )
        self.endpoint_cost = Counter(
            "kvgate_endpoint_cost_usd", "Cost of answered requests by the endpoint that served them, USD.", ["endpoint"],
            registry=r,
        )
        # the close-out counts each once, keyed (model, cluster, endpoint[, kind]); the tally's flush adds it to both
        self.tokens_by = Split(self.tokens, (0, 1, 3), self.endpoint_tokens, (2, 3))
        self.cost_by = Split(self.cost, (0, 1), self.endpoint_cost, (2,))
        self.route_decisions = Counter(
            "kvgate_route_decisions", "Finished requests by public model, route and the cluster that served them (the "
            "route mix).", ["model", "route", "cluster"], registry=r,
        )
        self.retries = Counter(
            "kvgate_retries", "Upstream attempts beyond the first, per request (each retry goes to the next ranked "
            "endpoint).", ["model", "cluster"], registry=r,
        )
        self.quota_refusals = Counter(
            "kvgate_quota_refusals", "Requests refused by a key's limit (rpm, tpm, budget).", ["key", "limit"], registry=r
        )
        self.state_store_errors = Counter(
            "kvgate_state_store_errors", "Failed calls to the state store by operation (quota_admit requests were let "
            "through when failing open).", ["operation"], registry=r,
        )

    def watch_endpoints(self, endpoints: Callable[[], Iterable[Any]]) -> None:
        """Export the live state of ``endpoints()`` at each scrape (circuit, draining, weight)."""
        collector = _EndpointStateCollector(endpoints)
        self.registry.register(collector)
        self._scrape_collectors.append(collector)

    def exposition(self) -> bytes:
        """The Prometheus text exposition (``text/plain; version=0.0.4``) for ``GET /metrics``.

        In one process: this registry. Under ``kvgate serve --processes N`` (the environment names
        ``PROMETHEUS_MULTIPROC_DIR``): every process's instruments read from that directory and
        combined by prometheus_client's ``MultiProcessCollector`` (counters and histograms summed,
        gauges per their ``multiprocess_mode``), plus this process's scrape-time collectors.
        """
        for flush in self.before_scrape:
            flush()
        directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        if not directory:
            return generate_latest(self.registry)
        combined = CollectorRegistry()
        multiprocess.MultiProcessCollector(combined, path=directory)
        for collector in self._scrape_collectors:
            combined.register(collector)
        return generate_latest(combined)

    # ---- event-loop lag (issue 23, long prompts; gateway/observability/loop_lag.py sets them) ----

    def _add_loop_lag_instruments(self, r: CollectorRegistry) -> None:
        """The event loop's lag: every tick of the lag monitor, and its window's worst and p99."""
        self.loop_lag = Histogram(
            "kvgate_event_loop_lag_seconds",
            "How late the event loop woke the lag monitor's ticker (one observation per tick), seconds.",
            buckets=_LOOP_LAG_BUCKETS,
            registry=r,
        )
        self.loop_lag_max = Gauge(
            "kvgate_event_loop_lag_max_seconds",
            "Worst event-loop lag over the lag monitor's window (recent ticks), seconds.",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.loop_lag_p99 = Gauge(
            "kvgate_event_loop_lag_p99_seconds",
            "99th percentile of the event-loop lag over the lag monitor's window, seconds.",
            registry=r,
            multiprocess_mode="livemax",
        )


class _EndpointStateCollector(Collector):
    """Reads endpoint state at scrape time, so the request path writes nothing for it."""

    def __init__(self, endpoints: Callable[[], Iterable[Any]]) -> None:
        self._endpoints = endpoints

    def collect(self) -> Iterator[Metric]:
        circuit = GaugeMetricFamily(
            "kvgate_endpoint_circuit_state",
            "1 for the endpoint's current circuit-breaker state (closed, open, half_open), else 0.",
            labels=["endpoint", "cluster", "state"],
        )
        draining = GaugeMetricFamily("kvgate_endpoint_draining", "1 while the endpoint is draining.", labels=["endpoint", "cluster"])
        weight = GaugeMetricFamily("kvgate_endpoint_weight", "The endpoint's routing weight.", labels=["endpoint", "cluster"])
        for endpoint in self._endpoints():
            cluster = endpoint.spec.cluster
            current = endpoint.circuit.value
            for state in ("closed", "open", "half_open"):
                circuit.add_metric([endpoint.name, cluster, state], 1.0 if state == current else 0.0)
            draining.add_metric([endpoint.name, cluster], 1.0 if endpoint.draining else 0.0)
            weight.add_metric([endpoint.name, cluster], endpoint.spec.weight)
        yield from (circuit, draining, weight)

    def describe(self) -> Iterator[Metric]:
        return iter(())


class RoutingMetrics:
    """Instruments of the routing framework on ``registry``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry or CollectorRegistry(auto_describe=True)
        self.producer_failures = Counter(
            "kvgate_routing_producer_failures", "Producers that timed out or failed (hint dropped).",
            ["producer", "reason"], registry=r,
        )
        self.hot_spot_diversions = Counter(
            "kvgate_routing_hot_spot_diversions", "Requests the hot-spot guard moved off their best prefix match.",
            ["cluster"], registry=r,
        )
        self.predictions = Counter(
            "kvgate_prefix_predictions", "Predicted vs reported cached prompt tokens (exact, over, under).",
            ["endpoint", "outcome"], registry=r,
        )
        self.accuracy = Gauge(
            "kvgate_prefix_prediction_accuracy", "1 - |predicted - reported cached tokens| / prompt tokens (EWMA).",
            ["endpoint", "source"], registry=r, multiprocess_mode="livemax",
        )
        self.capacity = Gauge("kvgate_prefix_index_capacity_blocks", "Capacity of an endpoint's prefix index, in blocks.",
                              ["endpoint"], registry=r, multiprocess_mode="livemax")
        self.degraded = Gauge("kvgate_state_degraded", "1 while the shared state store is bypassed and routing uses "
                              "the local view.", registry=r, multiprocess_mode="livemax")
        self.fallbacks = Counter("kvgate_state_fallbacks", "Shared state store calls that fell back to the local view.",
                                 ["reason"], registry=r)
        self.scrape_failures = Counter("kvgate_engine_scrape_failures", "Failed scrapes of an endpoint's /metrics.",
                                       ["endpoint"], registry=r)
        self.restarts = Counter("kvgate_engine_restarts", "Endpoint restarts detected from its metrics (index cleared).",
                                ["endpoint"], registry=r)
        self.kv_event_batches = Counter("kvgate_kv_event_batches", "KV-event batches applied (precise mode); outcome "
                                        "gap/restart: the set was cleared first.", ["endpoint", "outcome"], registry=r)
        self.kv_event_dropped = Counter("kvgate_kv_event_dropped", "KV-event messages dropped (unknown_topic, malformed).",
                                        ["reason"], registry=r)
        for instrument in (self.producer_failures, self.hot_spot_diversions, self.predictions, self.accuracy, self.capacity):
            cache_children(instrument)


class RouteMetrics:
    """Route selection's instruments on ``registry``; the selection count goes through ``tally`` if given."""

    def __init__(self, registry: CollectorRegistry, tally: Tally | None = None) -> None:
        self.registry, self.tally = registry, tally  # tally: GatewayMetrics.tally, on the same registry
        self.selections = Counter(
            "kvgate_route_selections",
            "Route selection decisions by public model, chosen primary cluster and reason.",
            ["model", "cluster", "reason"],
            registry=registry,
        )
        self.context_rejections = Counter(
            "kvgate_route_context_rejections",
            "Requests refused with context_length_exceeded before any upstream call.",
            ["model"],
            registry=registry,
        )
        self.key_cost = Counter(
            "kvgate_key_cost_usd",
            "Cost of answered requests at the serving cluster's prices, by key name, model and cluster, USD.",
            ["key", "model", "cluster"],
            registry=registry,
        )
        self.signal_seconds = Histogram(
            "kvgate_route_classifier_seconds",
            "Time to read one request's route selection signals (features and classifier), seconds.",
            buckets=(1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 5e-3),
            registry=registry,
        )
        for instrument in (self.selections, self.context_rejections, self.key_cost):
            cache_children(instrument)

    def watch_clusters(self, views: Callable[[], Iterable[Any]]) -> None:
        """Export each tiered cluster's live view (``selection/load.py``) at scrape time."""
        self.registry.register(_ClusterCollector(views))


class _ClusterCollector(Collector):
    def __init__(self, views: Callable[[], Iterable[Any]]) -> None:
        self._views = views

    def collect(self) -> Iterator[Metric]:
        ttft = GaugeMetricFamily(
            "kvgate_cluster_predicted_ttft_seconds", "Predicted TTFT of a new request on the cluster, seconds.",
            labels=["cluster"],
        )
        load = GaugeMetricFamily(
            "kvgate_cluster_load", "Busy share of the least busy endpoint's slots with one more request.", labels=["cluster"]
        )
        errors = GaugeMetricFamily("kvgate_cluster_error_rate", "Recent upstream error rate (EWMA).", labels=["cluster"])
        for view in self._views():
            if view.routable:
                ttft.add_metric([view.name], view.predicted_ttft_s)
                load.add_metric([view.name], view.load)
            errors.add_metric([view.name], view.error_rate)
        yield from (ttft, load, errors)

    def describe(self) -> Iterator[Metric]:
        return iter(())


_QUEUE_WAIT_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


class AdmissionMetrics:
    """Admission's instruments on ``registry`` (see the module docstring); ``priorities``: class names, highest first."""

    def __init__(self, registry: CollectorRegistry, priorities: tuple[str, ...]) -> None:
        self.registry = registry
        self.priorities = priorities
        self.decisions = Counter(
            "kvgate_admission_decisions", "Admission decisions by cluster, action (admit, spill, shed) and reason.",
            ["cluster", "action", "reason"], registry=registry,
        )
        self.queue_wait = Histogram(
            "kvgate_admission_queue_wait_seconds",
            "Time a request waited in the gateway's admission queue, by cluster and priority, seconds.",
            ["cluster", "priority"], buckets=_QUEUE_WAIT_BUCKETS, registry=registry,
        )
        self.admitted = Counter(
            "kvgate_admission_admitted", "Requests admitted (at once or after queueing) by cluster and key name.",
            ["cluster", "key"], registry=registry,
        )
        self._admitted: dict[tuple[str, str], int] = {}  # (cluster, key) -> admitted, for the share gauge
        self._free: dict[tuple[str, str], int] = {}  # (cluster, key) -> free admissions not yet in the counters
        self._pending = 0
        for instrument in (self.decisions, self.queue_wait, self.admitted):
            cache_children(instrument)

    def count_admitted(self, cluster: str, key: str, count: int = 1) -> None:
        """``count`` requests of ``key`` admitted on ``cluster`` (the counter and the share's tally; keys bounded)."""
        self.admitted.labels(cluster, key).inc(count)
        tally = self._admitted
        if (cluster, key) in tally or len(tally) < 10_000:
            tally[(cluster, key)] = tally.get((cluster, key), 0) + count

    def count_free(self, cluster: str, key: str) -> None:
        """One request admitted at once (``reason=free``): a plain int, no prometheus_client call (the hot
        path); :meth:`flush` (before each scrape, and every 4,096 here) adds it to the counters."""
        self._free[(cluster, key)] = self._free.get((cluster, key), 0) + 1
        self._pending += 1
        if self._pending >= 4096:
            self.flush()

    def flush(self) -> None:
        """Move the free admissions counted since the last flush into the counters and the share's tally."""
        tally, self._free, self._pending = self._free, {}, 0
        for (cluster, key), count in tally.items():
            self.decisions.labels(cluster, "admit", "free").inc(count)
            self.count_admitted(cluster, key, count)

    def watch_queue(self, depth: Callable[[str, int], int], clusters: Callable[[], Iterable[str]]) -> None:
        """Export ``depth(cluster, priority)`` for ``clusters()`` and the key shares at scrape time."""
        self.registry.register(_AdmissionCollector(self, depth, clusters))


class _AdmissionCollector(Collector):
    def __init__(self, metrics: AdmissionMetrics, depth: Callable[[str, int], int], clusters: Callable[[], Iterable[str]]):
        self._metrics, self._depth, self._clusters = metrics, depth, clusters

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily("kvgate_admission_queue_depth", "Requests waiting in the gateway's admission queue "
                                  "now.", labels=["cluster", "priority"])
        for cluster in self._clusters():
            for index, priority in enumerate(self._metrics.priorities):
                depth.add_metric([cluster, priority], float(self._depth(cluster, index)))
        share = GaugeMetricFamily("kvgate_admission_key_share", "The key's share of the requests admitted on the "
                                  "cluster since start (0..1).", labels=["cluster", "key"])
        self._metrics.flush()
        tally = dict(self._metrics._admitted)
        totals: dict[str, int] = {}
        for (cluster, _), count in tally.items():
            totals[cluster] = totals.get(cluster, 0) + count
        for (cluster, key), count in tally.items():
            share.add_metric([cluster, key], count / totals[cluster])
        yield from (depth, share)

    def describe(self) -> Iterator[Metric]:
        return iter(())
