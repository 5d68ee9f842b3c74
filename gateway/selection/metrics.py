"""Route selection's Prometheus instruments, on the app's registry.

* ``kvgate_route_selections_total{model, cluster, reason}``: one per selected request, by the
  public name the client sent, the primary cluster chosen and the policy's reason
  (``needs_reasoning``, ``light``, ``downgrade_ttft``, ``downgrade_cost``, ``downgrade_budget``,
  ``upgrade_saturated``, ``upgrade_ttft``, ``unavailable``, ``context_fit``, ``tier``, or a
  pinned model's route reason ``model``/``route``/``cluster``). Every downgrade and upgrade is
  counted here. (``kvgate_route_decisions_total{model, route, cluster}``, the route mix of
  finished requests, is the recorder's, ``observability/recorder.py``.)
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

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, Metric
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway.observability.metrics import cache_children


class RouteMetrics:
    """Route selection's instruments on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
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
