"""The per-request record: a bounded in-memory ring of this replica's most recent requests.

:meth:`RequestLog.add` is called once per request by the close-out
(:meth:`~gateway.closeout.CloseOut.close`), for successes, errors and
cancels alike. It keeps one tuple per request of the exchange's fields (small values and shared objects: the
key's record, the route selection, the token counts; no reference to the request, its body or
its exchange), plus the scheduling decision in compact form
(:meth:`~gateway.scheduling.profile.ProfileDecision.record`: candidates, the scorers' columns
already computed while scheduling, the filtered names; never the prompt), so the hot-path cost is
one tuple and one ``deque.append`` (``bench/gateway_path.py``: see ``/work/notes/i24.md``).

Rendering to JSON happens only when the admin API reads the ring (``GET /admin/requests``,
``GET /admin/requests/{id}``, ``gateway/api/admin_console.py``). The ring holds at most
``admin.request_log_size`` records (default 1000; 0 turns it off): the oldest falls out first.

It is per process: under ``kvgate serve --processes N`` or several replicas each keeps its own,
and every answer names the replica (:func:`replica_identity`) so an operator knows which one it
was. Field units: seconds for ``ttft_s``/``e2e_s`` (TTFT from the request's start to the first
content token of a stream, also one cancelled or broken after that token reached the client; None
when not streamed or no token was sent), USD for ``cost_usd``, Unix seconds for ``at``,
milliseconds for ``queue_ms`` (time waited in the admission queue, ``gateway/admission/``; 0 when
admitted at once or admission is off). ``api`` names the API (``chat``, ``completions``,
``responses``, ``responses.retrieve``, ``messages``, ``embeddings``, ...: ``gateway/protocol/apis.py``).
"""

from __future__ import annotations

import os
import socket
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

# the order of the tuple RequestLog.add stores; as_dict names them
FIELDS = (
    "at", "id", "key", "model", "route", "reason", "cluster", "endpoint", "attempts", "continuations",
    "prompt_tokens", "cached_tokens", "completion_tokens", "predicted_cached_tokens", "cost_usd",
    "ttft_s", "e2e_s", "status", "outcome", "error", "queue_ms", "api",
)
_CANCELLED_STATUS = 499  # the client left (nginx's convention; no answer was written)


def replica_identity() -> dict[str, Any]:
    """Which process answers: ``{"id": "HOST:PID", "host": ..., "pid": ...}``."""
    host = socket.gethostname()
    pid = os.getpid()
    return {"id": f"{host}:{pid}", "host": host, "pid": pid}


class RequestLog:
    """A ring of at most ``size`` records, newest last. Event-loop only (no locking)."""

    __slots__ = ("_ring", "_wall", "size")

    def __init__(self, size: int, wall_clock: Callable[[], float]) -> None:
        self.size = size
        self._ring: deque[tuple[Any, ...]] = deque(maxlen=max(size, 1))
        self._wall = wall_clock

    def add(self, exchange: Any, tokens: Any, cost: float) -> None:
        """Record one finished exchange (``tokens``: its TokenUsage or None; ``cost``: USD).

        Only attribute reads and one tuple here; everything derived is computed when read.
        """
        if not self.size:
            return
        decision, routed = exchange.decision, exchange.selection  # routed holds the request: keep its Selection only
        record = getattr(decision, "record", None)
        self._ring.append((
            self._wall(), exchange.request_id, exchange.admission, exchange.model, exchange.route,
            routed.selection if routed is not None else None,
            exchange.cluster, exchange.endpoint, exchange.attempts, exchange.continuations, tokens,
            getattr(decision, "predicted_cached", None), cost, exchange.started, exchange.first_token_at,
            exchange.ended_at, exchange.status, exchange.outcome, exchange.error_type,
            getattr(exchange, "queued_s", 0.0), getattr(exchange, "api", "chat"),
            record() if record is not None else (None if decision is None else PlainDecision(decision.ranked)),
        ))

    def __len__(self) -> int:
        return len(self._ring)

    def recent(self, limit: int) -> list[dict[str, Any]]:
        """The newest ``limit`` records as dicts (:data:`FIELDS`), newest first."""
        out = []
        for entry in self._newest():
            if len(out) >= limit:
                break
            out.append(as_dict(entry))
        return out

    def find(self, request_id: str) -> tuple[dict[str, Any], Any, Any] | None:
        """The newest record with this request id, its compact decision and its route selection, or None."""
        for entry in self._newest():
            if entry[1] == request_id:
                return as_dict(entry), entry[-1], entry[5]
        return None

    def _newest(self) -> Iterator[tuple[Any, ...]]:
        return reversed(self._ring) if self.size else iter(())


def as_dict(entry: tuple[Any, ...]) -> dict[str, Any]:
    """One stored entry as JSON-ready data (:data:`FIELDS`; seconds rounded to microseconds, USD to 1e-9)."""
    (at, request_id, admission, model, route, selection, cluster, endpoint, attempts, continuations, tokens,
     predicted, cost, started, first, ended, status, outcome, error, queued, api, _) = entry
    return {
        "at": round(at, 3), "id": request_id, "key": admission.key.name if admission is not None else None,
        "model": model, "route": route, "reason": selection.reason if selection is not None else None,
        "cluster": cluster, "endpoint": endpoint, "attempts": attempts, "continuations": continuations,
        "prompt_tokens": tokens.input if tokens is not None else None,
        "cached_tokens": tokens.cached if tokens is not None else None,
        "completion_tokens": tokens.output if tokens is not None else None,
        "predicted_cached_tokens": predicted, "cost_usd": round(cost, 9),
        "ttft_s": None if first is None else round(first - started, 6), "e2e_s": round(ended - started, 6),
        "status": _CANCELLED_STATUS if outcome == "cancelled" else status, "outcome": outcome, "error": error,
        "queue_ms": round(queued * 1000.0, 3), "api": api,
    }


class PlainDecision:
    """The decision of a scheduler without scorers (round-robin, least-in-flight): its order."""

    __slots__ = ("ranked",)

    def __init__(self, ranked: list[Any]) -> None:
        self.ranked = ranked  # the endpoints, best first (shared objects, not copied)

    def render(self) -> dict[str, Any]:
        names = [endpoint.spec.name for endpoint in self.ranked]
        return {"profile": None, "scored": False, "ranked": names, "endpoints": [{"name": n, "scores": {}} for n in names]}
