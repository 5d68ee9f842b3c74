"""One inference request's record: where it went, how long it took, how it ended.

The director fills in the route, cluster and endpoint as it decides; whoever ends the request
(the buffered writer through ``BufferedReply.settle``, the stream relay, the director on an
error, the edge on a cancel) calls :meth:`Exchange.finish` once, which hands the finished
exchange to its close-out (``gateway/closeout.py``: metrics, cost, key settlement, load
observation, trace, the per-request record). Later calls are ignored, so error paths may call it
defensively.

The close-out reads ``usage``/``tokens``, ``first_token_at``, ``ended_at``, ``error_type`` (the
OpenAI error code of a failed request, set with its HTTP ``status``), ``admission`` (the key's
admission), ``selection`` (route selection's :class:`~gateway.selection.selector.Routed`),
``queued_s`` (seconds waited in the admission queue), ``api`` (the API's name in
``gateway/protocol/apis.py``: ``chat``, ``completions``, ``responses``, ``embeddings``, ...) and ``trace`` (the request's spans, when
tracing is on). ``lease`` is the admission's (``gateway/admission/gate.py``), held by its attempts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gateway.keys.pricing import TokenUsage

if TYPE_CHECKING:
    from gateway.closeout import CloseOut

SUCCESS = "success"
CLIENT_ERROR = "client_error"
UPSTREAM_ERROR = "upstream_error"
CANCELLED = "cancelled"


class Exchange:
    """Timings (seconds, from the injected monotonic clock) and outcome of one request."""

    __slots__ = (
        "request_id", "model", "route", "cluster", "endpoint", "decision", "attempts", "continuations",
        "started", "_clock", "outcome", "usage", "first_token_at", "ended_at", "error_type", "admission", "trace",
        "_closeout", "selection", "tokens", "status", "lease", "queued_s", "api", "answered_at",
    )

    def __init__(
        self, request_id: str, model: str, clock: Callable[[], float], closeout: CloseOut | None = None,
        api: str = "chat",
    ) -> None:
        self.request_id = request_id
        self.api = api
        self.model = model
        self.route = ""
        self.cluster = ""
        self.endpoint = ""
        self.attempts = 0  # upstream attempts made
        self.continuations = 0  # mid-stream continuations on another endpoint
        self.decision: Any = None  # the scheduling Decision, once scheduled
        self._clock = clock
        self.started = clock()
        self.outcome: str | None = None
        self.usage: Any = None
        self.tokens: TokenUsage | None = None  # ``usage`` read once at finish, for every effect
        self.first_token_at: float | None = None
        self.ended_at = 0.0
        self.error_type: str | None = None
        self.status = 200  # the HTTP status answered (set with error_type for a failed request)
        self.admission: Any = None  # gateway.keys.gate.Admission
        self.trace: Any = None  # gateway.observability.tracing.RequestTrace
        self._closeout = closeout
        self.selection: Any = None  # gateway.selection.selector.Routed: the route selection
        self.lease: Any = None  # gateway.admission.gate.Lease: the admitted request's ([admission] on)
        self.queued_s = 0.0  # seconds it waited in the gateway's admission queue
        self.answered_at: float | None = None  # set by :meth:`answered`: the E2E end of a request left open

    def answered(self) -> None:
        """The client has its whole answer, but the request stays open for its usage (a background
        Response, ``gateway/background_usage.py``): its E2E latency ends now, not at :meth:`finish`,
        so the metrics and the load model never see the background run as a request's latency."""
        self.answered_at = self._clock()

    def finish(self, outcome: str, *, usage: Any = None, first_token_at: float | None = None) -> None:
        """Record the outcome (one of the module's constants), usage and TTFT (``first_token_at``: a stream's
        first token sent to the client, whatever the outcome; None if none was); then close out (once)."""
        if self.outcome is not None:
            return
        self.outcome = outcome
        ended = self._clock() if self.answered_at is None else self.answered_at
        self.usage, self.first_token_at, self.ended_at = usage, first_token_at, ended
        self.tokens = TokenUsage.from_openai(usage)
        if self.lease is not None:  # the request's hold on its admission (its attempts hold their own)
            self.lease.drop()
        if self._closeout is not None:
            self._closeout.close(self)
