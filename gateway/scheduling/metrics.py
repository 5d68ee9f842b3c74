"""The scheduling framework's Prometheus instruments, defined once, on the app's registry.

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
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.observability.metrics import cache_children


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
        self.capacity = Gauge(
            "kvgate_prefix_index_capacity_blocks", "Capacity of an endpoint's prefix index, in blocks.",
            ["endpoint"], registry=r, multiprocess_mode="livemax",
        )
        self.degraded = Gauge(
            "kvgate_state_degraded", "1 while the shared state store is bypassed and routing uses the local view.",
            registry=r, multiprocess_mode="livemax",
        )
        self.fallbacks = Counter(
            "kvgate_state_fallbacks", "Shared state store calls that fell back to the local view.", ["reason"], registry=r,
        )
        self.scrape_failures = Counter(
            "kvgate_engine_scrape_failures", "Failed scrapes of an endpoint's /metrics.", ["endpoint"], registry=r,
        )
        self.restarts = Counter(
            "kvgate_engine_restarts", "Endpoint restarts detected from its metrics (index cleared).", ["endpoint"], registry=r,
        )
        for instrument in (self.producer_failures, self.hot_spot_diversions, self.predictions, self.accuracy, self.capacity):
            cache_children(instrument)
