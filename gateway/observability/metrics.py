"""Every Prometheus instrument of the gateway, defined once, on a per-app registry.

Names follow Prometheus conventions (base units: seconds, ``_total`` for counters) and, where
they exist, OpenTelemetry's GenAI semantic conventions for the meaning of each figure
(``gen_ai.server.time_to_first_token``, ``gen_ai.client.token.usage``).

Request outcomes (label ``outcome``):
    ``success``: the endpoint answered 2xx and, for streams, finished without an in-band error.
    ``client_error``: the request was refused (4xx from kvgate or passed through from an endpoint).
    ``upstream_error``: the endpoint failed (connect, 5xx, timeout, broken or in-band error stream).
    ``cancelled``: the client disconnected first (never counted against the endpoint).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class GatewayMetrics:
    """The gateway's instruments on ``registry`` (a fresh one per app by default)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "kvgate_requests",
            "Inference requests by public model, cluster, endpoint and outcome.",
            ["model", "cluster", "endpoint", "outcome"],
            registry=r,
        )
        self.request_duration = Histogram(
            "kvgate_request_duration_seconds",
            "E2E latency of inference requests as the gateway saw it, seconds.",
            ["model", "cluster"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "kvgate_time_to_first_token_seconds",
            "Time from request arrival to the first streamed token, seconds.",
            ["model", "cluster"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "kvgate_tokens",
            "Tokens by kind: prompt, cached (prompt tokens served from the prefix cache), completion.",
            ["model", "cluster", "kind"],
            registry=r,
        )
        self.upstream_failures = Counter(
            "kvgate_upstream_failures",
            "Failed attempts against an endpoint, by reason.",
            ["endpoint", "reason"],
            registry=r,
        )
        self.failovers = Counter(
            "kvgate_failovers",
            "Requests that moved from one cluster of their route to the next, before the first byte.",
            ["from_cluster", "to_cluster"],
            registry=r,
        )
        self.continuations = Counter(
            "kvgate_stream_continuations",
            "Streams broken after content was sent and continued on another endpoint of the cluster.",
            ["cluster"],
            registry=r,
        )
        self.in_flight = Gauge(
            "kvgate_endpoint_in_flight",
            "Requests in flight to an endpoint from this gateway process.",
            ["endpoint"],
            registry=r,
        )
        self.healthy = Gauge(
            "kvgate_endpoint_healthy",
            "1 if the endpoint is routable and its last check passed, else 0.",
            ["endpoint"],
            registry=r,
        )
