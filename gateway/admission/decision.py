"""The admission decision (pure): admit now, queue, spill over to a named target, or shed.

Input: the primary cluster's :class:`~gateway.admission.saturation.Saturation` for this request
(computed behind the gateway waiters of its priority or higher), the route's wait limit, the
queue's room for it, and the route's spill targets with their own saturation and this request's
estimated price there. In order:

1. **admit** (``reason=free``) when an endpoint can start it now: predicted wait 0 behind the
   waiters already queued, which then all fit too (``wake``: the caller releases them);
2. **spill at once** (``reason=spill_saturated``) when the primary cannot start it now, a spill
   target can take it (see 4) and waiting here would miss the deadline: the primary's predicted
   wait plus its predicted time to first token (``first_token_s``) is over the limit while the
   target's latest spill time (see 3) is still ahead. **Fair share** (``share``,
   :mod:`gateway.admission.fairness`): a request that keeps its key within its weighted max-min
   share of the primary (``"under"``) is not spilled at once, nor for saturation (4), while the
   queue has room and its latest spill time is ahead: it queues, the fair queue serves it first,
   and it spills at its latest spill time if still waiting. So when the primary is saturated the
   requests of keys over their share overflow first;
3. **queue** (``reason=queued``) when the primary is not saturated (the wait is within the
   limit, or an engine says it has room) and the queue has room for the request: it waits in
   the gateway, not in the engine, up to the limit (the ticket's TTL). With a spill target it
   also has a **latest spill time** ``spill_after_s = limit - target.first_token_s`` (the limit
   minus the target's predicted wait plus time to first token, the same load model): a waiter
   still queued then is judged again for spill (``queue_room="capacity"``) while a spill can
   still make its deadline, not at the TTL. A waiter that times out is decided again the same
   way: spill or shed;
4. **spill** (``reason=spill_saturated``) when it cannot start in time here (the wait is over
   the limit, or the queue is full) and a spill target of the route (``spill_to``, in order)
   predicts a shorter wait, within the limit, is not saturated itself, and the key's remaining
   budget covers the request's estimated price there. Spill-over is not a failure: breakers
   and health are untouched. ``X-Failover-Route: false`` disables it (``allow_spill``);
5. **shed** otherwise: 429 ``rate_limit_exceeded`` (``reason=shed_key_limit``) when the key's
   own waiter bound is what refused it, else 503 ``engine_overloaded``
   (``reason=shed_capacity``), both in OpenAI's error shape with ``Retry-After`` = the
   predicted drain time in whole seconds (RFC 9110 delay-seconds: rounded up, at least 1) and
   ``retry-after-ms`` = the same drain in milliseconds (the openai SDKs read it first, so a
   sub-second drain is not rounded up to 1 s). Lower priorities are shed first: a request
   counts the waiters of its priority and above, so a batch request sees the longer wait, and a
   full queue evicts its lowest priority for a higher one (``queue.py``).

The :class:`Decision` carries the reason for ``x-kvgate-route: NAME; reason=...``, the explain
endpoint and the admission metrics.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.admission.saturation import Saturation
from gateway.config.admission import PRIORITIES, AdmissionKeySettings
from gateway.errors import GatewayError, RateLimitError


class Action(enum.Enum):
    ADMIT = "admit"
    QUEUE = "queue"
    SPILL = "spill"
    SHED = "shed"


class OverloadedError(GatewayError):
    """503: every cluster that may take the request is saturated; ``Retry-After`` says when to retry."""

    status = 503
    type = "server_error"
    code = "engine_overloaded"


@dataclass(frozen=True, slots=True)
class SpillTarget:
    """A spill target of the route: its saturation, this request's estimated price there (USD) and its
    predicted time from dispatch to first token there (its wait plus its base TTFT, seconds)."""

    saturation: Saturation
    price_usd: float = 0.0
    first_token_s: float = 0.0

    @property
    def cluster(self) -> str:
        return self.saturation.cluster


@dataclass(frozen=True, slots=True)
class Decision:
    """What admission decided for one request.

    Attributes:
        action: admit, queue, spill or shed.
        cluster: where the request goes (the primary, or the spill target); the primary when shed.
        reason: ``free``, ``queued``, ``spill_saturated``, ``shed_capacity`` or ``shed_key_limit``.
        wait_s: the primary's predicted wait, seconds.
        ttl_s: how long a queued request may wait (the route's limit), seconds.
        retry_after_s: whole seconds for ``Retry-After`` when shed, else None.
        retry_after_ms: the predicted drain in milliseconds for ``retry-after-ms`` when shed, else None.
        spill_after_s: for ``queue`` with a spill target: seconds after queueing when the waiter is
            judged again for spill (its latest spill time); None: only at the TTL.
        wake: waiters of the primary the caller should release now (admitted with room for all).
        queued_s: seconds the request waited in the gateway queue (set by the gate).
    """

    action: Action
    cluster: str
    reason: str
    wait_s: float
    ttl_s: float = 0.0
    retry_after_s: int | None = None
    wake: int = 0
    retry_after_ms: int | None = None
    spill_after_s: float | None = None
    queued_s: float = 0.0

    @property
    def status(self) -> int | None:
        """429 or 503 when shed, else None."""
        if self.action is not Action.SHED:
            return None
        return 429 if self.reason == "shed_key_limit" else 503

    def error(self) -> GatewayError:
        """The OpenAI-shaped error of a shed (``Retry-After`` set). Raises ValueError if not shed."""
        if self.action is not Action.SHED:
            raise ValueError(f"not shed: {self.action.value}")
        headers = {"Retry-After": str(self.retry_after_s or 1)}
        if self.retry_after_ms is not None:
            headers["retry-after-ms"] = str(self.retry_after_ms)
        if self.reason == "shed_key_limit":
            return RateLimitError(
                "Too many of this key's requests are waiting for capacity; retry after the Retry-After delay.",
                headers=headers,
            )
        return OverloadedError(
            f"Cluster {self.cluster!r} is saturated and nothing can take the request within its wait limit; "
            "retry after the Retry-After delay.",
            headers=headers,
        )


def retry_after(drain_s: float) -> int:
    """``Retry-After`` seconds for a predicted drain time: rounded up, at least 1 (1 when unknown)."""
    if not math.isfinite(drain_s):
        return 1
    return max(1, math.ceil(drain_s - 1e-9))


def retry_after_ms(drain_s: float) -> int:
    """``retry-after-ms`` for a predicted drain time: rounded up to a millisecond, at least 1 (1000 when unknown)."""
    if not math.isfinite(drain_s):
        return 1000
    return max(1, math.ceil(drain_s * 1000.0 - 1e-6))


def decide(
    primary: Saturation,
    *,
    limit_s: float,
    queued: int = 0,
    queue_room: str | None = None,
    spill: Sequence[SpillTarget] = (),
    allow_spill: bool = True,
    budget_left_usd: float | None = None,
    first_token_s: float = 0.0,
    share: str | None = None,
) -> Decision:
    """The admission :class:`Decision` (see the module docstring).

    ``queued``: gateway waiters ahead of the request on the primary; ``queue_room``: None when
    the queue can take it, else the reason it cannot (``key_limit`` or ``capacity``, as
    :class:`~gateway.admission.queue.QueueFull` says); ``budget_left_usd``: the key's remaining
    budget (None: no budget); ``first_token_s``: the primary's predicted time from start to first
    token (its base TTFT), s; ``share``: ``"under"`` when the request keeps its key within its fair share
    of the primary, ``"over"`` when it would put it over, None when no other key holds anything there.
    """
    cluster, wait = primary.cluster, primary.wait_s
    if primary.routable == 0:  # nothing to wait for: failover decides
        return Decision(Action.ADMIT, cluster, "free", wait)
    if primary.can_start_now:
        return Decision(Action.ADMIT, cluster, "free", wait, wake=queued)
    target = _spill_target(primary, spill, limit_s, budget_left_usd) if allow_spill else None
    if queue_room is None and (not primary.saturated or (share == "under" and target is not None)):
        if target is None:
            return Decision(Action.QUEUE, cluster, "queued", wait, ttl_s=limit_s)
        latest = limit_s - target.first_token_s  # the latest spill time that still makes the deadline
        late = primary.saturated or wait + first_token_s > limit_s
        if latest > 0.0 and (share == "under" or not late):
            return Decision(Action.QUEUE, cluster, "queued", wait, ttl_s=limit_s, spill_after_s=latest)
        if latest <= 0.0 and not primary.saturated:  # a spill cannot make the deadline either: wait here
            return Decision(Action.QUEUE, cluster, "queued", wait, ttl_s=limit_s)
    if target is not None:
        return Decision(Action.SPILL, target.cluster, "spill_saturated", wait)
    reason = "shed_key_limit" if queue_room == "key_limit" else "shed_capacity"
    return Decision(Action.SHED, cluster, reason, wait, retry_after_s=retry_after(primary.drain_s),
                    retry_after_ms=retry_after_ms(primary.drain_s))


def _spill_target(
    primary: Saturation, spill: Sequence[SpillTarget], limit_s: float, budget_left_usd: float | None
) -> SpillTarget | None:
    for target in spill:
        there = target.saturation
        if there.routable == 0 or there.saturated or there.wait_s > limit_s or there.wait_s >= primary.wait_s:
            continue
        if budget_left_usd is not None and target.price_usd > budget_left_usd:
            continue
        return target
    return None


def resolve_priority(key: AdmissionKeySettings, header: str | None) -> int:
    """The priority index (0 highest, :data:`PRIORITIES`) of a request of ``key`` with ``X-Priority: header``.

    A request may always lower itself; it may raise itself above the key's class only when the
    key has ``allow_priority_header``. An unknown header value is ignored.
    """
    own = PRIORITIES.index(key.priority)
    if header is None:
        return own
    wanted = header.strip().lower()
    if wanted not in PRIORITIES:
        return own
    asked = PRIORITIES.index(wanted)
    return asked if asked >= own or key.allow_priority_header else own
