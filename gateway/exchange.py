"""One inference request's record: where it went, how long it took, how it ended.

The proxy fills in the cluster and endpoint as it decides; whoever ends the request (the
non-streaming reply, the stream relay, or an error handler) calls :meth:`Exchange.finish` once,
which writes the metrics. Later calls are ignored, so error paths may call it defensively.

``on_finish`` (given by ``gateway/operations.py``) then runs once with the finished exchange:
cost, key usage settlement and spans (``gateway/observability/recorder.py``). It reads
``usage``, ``first_token_at``, ``ended_at``, ``error_type`` (the OpenAI error code of a failed
request, set by the handler, with its HTTP ``status``), ``admission`` (the key's admission) and ``trace`` (the request's
spans, when tracing is on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gateway.keys.pricing import TokenUsage
from gateway.observability.metrics import GatewayMetrics

SUCCESS = "success"
CLIENT_ERROR = "client_error"
UPSTREAM_ERROR = "upstream_error"
CANCELLED = "cancelled"


class Exchange:
    """Timings (seconds, from the injected monotonic clock) and outcome of one request."""

    __slots__ = (
        "request_id", "model", "route", "cluster", "endpoint", "decision", "attempts", "continuations",
        "started", "_clock", "_metrics", "outcome",
        "usage", "first_token_at", "ended_at", "error_type", "admission", "trace", "_on_finish",
        "selection", "_listeners", "tokens", "status",
    )

    def __init__(
        self,
        request_id: str,
        model: str,
        clock: Callable[[], float],
        metrics: GatewayMetrics,
        *,
        on_finish: Callable[[Exchange], None] | None = None,
    ) -> None:
        self.request_id = request_id
        self.model = model
        self.route = ""
        self.cluster = ""
        self.endpoint = ""
        self.attempts = 0  # upstream attempts made
        self.continuations = 0  # mid-stream continuations on another endpoint
        self.decision: Any = None  # the routing Decision, once scheduled
        self._clock = clock
        self._metrics = metrics
        self.started = clock()
        self.outcome: str | None = None
        self.usage: Any = None
        self.tokens: TokenUsage | None = None  # ``usage`` read once at finish, for every listener
        self.first_token_at: float | None = None
        self.ended_at = 0.0
        self.error_type: str | None = None
        self.status = 200  # the HTTP status answered (set with error_type by the handler of a failed request)
        self.admission: Any = None  # gateway.keys.gate.Admission
        self.trace: Any = None  # gateway.observability.tracing.RequestTrace
        self._on_finish = on_finish
        self.selection: Any = None  # gateway.selection.selector.Routed: the route selection
        self._listeners: list[Callable[[Exchange], None]] = []

    def add_listener(self, callback: Callable[[Exchange], None]) -> None:
        """Also call ``callback(self)`` once when the exchange finishes, after ``on_finish``."""
        self._listeners.append(callback)

    def finish(self, outcome: str, *, usage: Any = None, first_token_at: float | None = None) -> None:
        """Record the outcome (one of the module's constants) and, on success, usage and TTFT."""
        if self.outcome is not None:
            return
        self.outcome = outcome
        self.usage, self.first_token_at, self.ended_at = usage, first_token_at, self._clock()
        self.tokens = TokenUsage.from_openai(usage)
        if self._on_finish is not None:
            self._on_finish(self)
        for listener in self._listeners:
            listener(self)
        m = self._metrics
        m.requests.labels(self.model, self.cluster, self.endpoint, outcome).inc()
        if outcome == CLIENT_ERROR and not self.cluster:
            return
        m.request_duration.labels(self.model, self.cluster).observe(self._clock() - self.started)
        if first_token_at is not None:
            m.ttft.labels(self.model, self.cluster).observe(first_token_at - self.started)
        if isinstance(usage, dict):
            self._count_tokens(usage)

    def _count_tokens(self, usage: dict[str, Any]) -> None:
        prompt = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens")
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if isinstance(details, dict) else None
        for kind, value in (("prompt", prompt), ("completion", completion), ("cached", cached)):
            if isinstance(value, int) and value > 0:
                self._metrics.tokens.labels(self.model, self.cluster, kind).inc(value)
