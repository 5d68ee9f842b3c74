"""The admission step of the director: judge, then queue and wait, spill or shed; hand slots on.

:class:`AdmissionGate` puts the pure parts together for one request. It reads the live state
through three small callables, so it imports nothing above its layer and tests need no app:

* ``loads(cluster) -> list[EndpointLoad]``: the routable endpoints now (``saturation.endpoint_loads``
  over the registry snapshot and the stats board's fresh scrapes);
* ``service_s(cluster) -> float``: the load model's service time of the cluster (the tracker's EWMA);
* ``price_usd(cluster) -> float``: the request's estimated price on the cluster (for spill budgets);
* ``first_token_s(cluster) -> float``: the cluster's predicted time from start to first token (the
  tracker's base TTFT, s): a spill target's wait plus this is how long a spill takes to answer,
  so a queued request's latest spill time is its limit minus that (``decision.py``).

Per key, the gate counts what each key holds on each cluster (its leases in flight; the queue
counts its waiters): when the primary is saturated, a request that keeps its key within its
weighted fair share of the primary's slots (``fairness.py``) still queues, so keys over their share
spill first.

Use (the director, between route selection and scheduling)::

    decision = await gate.admit(Ask(chain[0], key_name, headers.get("x-priority"), route.max_queue_wait_s,
                                    route.spill_to, allow_spill=route.failover, budget_left_usd=...))
    if decision.action is Action.SHED: raise decision.error()
    # decision.cluster serves it (a spill target when reason == "spill_saturated")
    ...
    lease = gate.lease(decision.cluster, key_name)   # attempts hold it; the last drop: gate.finished(cluster, key)

:meth:`AdmissionGate.judge` is the same decision without side effects (the explain endpoint).
With ``enabled = false`` every request is admitted at once and nothing is computed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from gateway.admission.decision import Action, Decision, SpillTarget, decide, resolve_priority
from gateway.admission.fairness import share_state
from gateway.admission.queue import AdmissionQueue, Outcome
from gateway.admission.saturation import EndpointLoad, Saturation, cluster_saturation
from gateway.config.admission import PRIORITIES, AdmissionKeySettings, AdmissionSettings
from gateway.observability.metrics import AdmissionMetrics

@dataclasses.dataclass(slots=True)  # made per request, never changed: not frozen
class Ask:
    """One request's admission question.

    Attributes:
        cluster: the route's primary cluster.
        key: the client key's name (fairness and per-key bounds).
        header: the request's ``X-Priority``, if any.
        limit_s: the route's ``max_queue_wait_s`` (None: ``[admission]``'s).
        spill_to: the route's spill targets, in order (clusters of its chain).
        allow_spill: False under ``X-Failover-Route: false``.
        budget_left_usd: the key's remaining budget (None: no budget).
        known_wait_s: the primary's predicted wait if route selection computed it already
            (``ClusterView.wait_s``, the same load model): 0 with nobody queued admits at once,
            with nothing recomputed (the unsaturated fast path).
    """

    cluster: str
    key: str
    header: str | None = None
    limit_s: float | None = None
    spill_to: Sequence[str] = ()
    allow_spill: bool = True
    budget_left_usd: float | None = None
    known_wait_s: float | None = None


@dataclasses.dataclass(slots=True)  # made per request, never changed: not frozen
class Judgement:
    """A decision and what it was made from (for explain and metrics)."""

    decision: Decision
    priority: int
    primary: Saturation | None = None
    targets: tuple[SpillTarget, ...] = ()
    share: str | None = None

    def render(self) -> dict[str, object]:
        """JSON-ready (``POST /admin/routing/explain``): the decision, and the saturation it was judged on
        (``null`` on the fast path: an endpoint was free and nobody queued). Times in ms."""
        d = self.decision
        return {
            "action": d.action.value, "cluster": d.cluster, "reason": d.reason, "priority": PRIORITIES[self.priority],
            "predicted_wait_ms": _ms(d.wait_s), "wait_limit_ms": _ms(d.ttl_s) if d.ttl_s else None,
            "retry_after_s": d.retry_after_s, "status": d.status,
            "primary": None if self.primary is None else _saturation(self.primary),
            "spill_targets": [{**_saturation(t.saturation), "price_usd": t.price_usd,
                               "first_token_ms": _ms(t.first_token_s)} for t in self.targets],
            "spill_after_ms": _ms(d.spill_after_s) if d.spill_after_s is not None else None,
            "retry_after_ms": d.retry_after_ms, "fair_share": self.share,
        }


def _ms(seconds: float) -> float | None:
    return round(seconds * 1000.0, 1) if seconds != float("inf") else None


def _saturation(s: Saturation) -> dict[str, object]:
    return {
        "cluster": s.cluster, "predicted_wait_ms": _ms(s.wait_s), "drain_ms": _ms(s.drain_s),
        "saturated": s.saturated, "measured": s.measured, "routable_endpoints": s.routable,
    }


class AdmissionGate:
    """One per app; event-loop only (see the module docstring)."""

    def __init__(
        self,
        settings: Callable[[], AdmissionSettings],
        queue: AdmissionQueue,
        *,
        loads: Callable[[str], Sequence[EndpointLoad]],
        service_s: Callable[[str], float],
        price_usd: Callable[[str], float] = lambda cluster: 0.0,
        first_token_s: Callable[[str], float] = lambda cluster: 0.0,
        quantile: float = 0.99,
        metrics: AdmissionMetrics | None = None,
    ) -> None:
        self._settings = settings
        self.queue = queue
        self._loads = loads
        self._service_s = service_s
        self._price_usd = price_usd
        self._first_token_s = first_token_s
        self._inflight: dict[str, dict[str, int]] = {}  # cluster -> key -> leases not yet returned
        self._quantile = quantile
        self.metrics = metrics
        self._admit_now: dict[str, Decision] = {}
        self._default: tuple[AdmissionSettings | None, AdmissionKeySettings] = (None, AdmissionKeySettings())

    def _free(self, cluster: str) -> Decision:
        """The (immutable, shared) admit-at-once decision of ``cluster``."""
        found = self._admit_now.get(cluster)
        if found is None:
            found = self._admit_now[cluster] = Decision(Action.ADMIT, cluster, "free", 0.0)
        return found

    def _key(self, settings: AdmissionSettings, key: str) -> AdmissionKeySettings:
        """``settings.key(key)``, with the default made once per settings object (a pydantic model costs ~10 us)."""
        found = settings.keys.get(key)
        if found is not None:
            return found
        if self._default[0] is not settings:
            self._default = (settings, settings.key(""))
        return self._default[1]

    def _saturation(
        self, cluster: str, key: str, priority: int, limit_s: float, settings: AdmissionSettings
    ) -> Saturation:
        return cluster_saturation(
            cluster, self._loads(cluster), service_s=self._service_s(cluster), limit_s=limit_s,
            queued=self.queue.ahead_of(cluster, priority, key), quantile=self._quantile,
            drain_quantile=settings.drain_quantile,
        )

    def judge(self, ask: Ask, queue_room: str | None = None) -> Judgement:
        """The admission decision for ``ask`` now, with no side effects (``queue_room``: force a refusal reason)."""
        settings = self._settings()
        cluster, key = ask.cluster, ask.key
        if not settings.enabled or (ask.known_wait_s == 0.0 and not self.queue.depth(cluster)):
            return Judgement(self._free(cluster), 0)
        key_settings = self._key(settings, key)
        priority = resolve_priority(key_settings, ask.header)
        limit = settings.wait_limit(ask.limit_s, priority)
        primary = self._saturation(cluster, key, priority, limit, settings)
        if queue_room is None:
            queue_room = self.queue.room(cluster, key, priority)
            if key_settings.max_queued is not None and self.queue.key_depth(key) >= key_settings.max_queued:
                queue_room = "key_limit"
        targets = self._targets(ask, priority, limit, settings) if primary.wait_s > 0 else ()
        share = self._share(cluster, key, settings) if targets and ask.allow_spill else None
        decision = decide(primary, limit_s=limit, queued=self.queue.ahead_of(cluster, priority, key),
                          queue_room=queue_room, spill=targets, allow_spill=ask.allow_spill,
                          budget_left_usd=ask.budget_left_usd, first_token_s=self._first_token_s(cluster),
                          share=share)
        return Judgement(decision, priority, primary, targets, share)

    def _targets(self, ask: Ask, priority: int, limit: float, settings: AdmissionSettings) -> tuple[SpillTarget, ...]:
        found = []
        for name in ask.spill_to:
            if name != ask.cluster:
                there = self._saturation(name, ask.key, priority, limit, settings)
                found.append(SpillTarget(there, self._price_usd(name), there.wait_s + self._first_token_s(name)))
        return tuple(found)

    def _share(self, cluster: str, key: str, settings: AdmissionSettings) -> str | None:
        """``fairness.share_state`` of a new request of ``key`` on ``cluster``'s slots."""
        demand: dict[str, float] = dict(self._inflight.get(cluster, {}))
        for name, waiting in self.queue.waiting_by_key(cluster).items():
            demand[name] = demand.get(name, 0) + waiting
        weights = {name: self._key(settings, name).weight for name in demand}
        weights.setdefault(key, self._key(settings, key).weight)
        capacity = sum(load.slots for load in self._loads(cluster))
        return share_state(key, demand, weights, capacity)

    def now(self, ask: Ask) -> Judgement:
        """:meth:`judge`, acting on it: the waiters an admission makes room for are released, and a
        decision that needs no wait (admit, spill, shed) is counted. A ``queue`` one goes to :meth:`admit`."""
        judgement = self.judge(ask)
        decision = judgement.decision
        if decision.wake:
            self.queue.release(ask.cluster, decision.wake)
        if decision.action is not Action.QUEUE:
            self._count(decision, judgement.priority, ask.key)
        return judgement

    async def admit(self, ask: Ask, judgement: Judgement | None = None) -> Decision:
        """Decide (or take ``judgement``, from :meth:`now`), and for ``queue`` wait in the gateway queue
        until admitted (``reason=queued``, ``queued_s`` set) or, after the TTL or an eviction, decide
        again (spill or shed).

        A cancelled caller leaves the queue at once.
        """
        if judgement is None:
            judgement = self.now(ask)
        decision = judgement.decision
        if decision.action is not Action.QUEUE:
            return decision
        weight = self._key(self._settings(), ask.key).weight
        ticket = self.queue.enqueue(
            ask.cluster, ask.key, ttl_s=decision.ttl_s, priority=judgement.priority, weight=weight,
            spill_after_s=decision.spill_after_s,
        )
        while True:
            outcome = await self.queue.wait(ticket)
            waited = ticket.waited_s or 0.0
            if outcome is Outcome.ADMITTED:
                decision = dataclasses.replace(decision, action=Action.ADMIT, queued_s=waited)
                break
            again = self.judge(ask, queue_room="capacity").decision
            if outcome is Outcome.SPILL_DUE and again.action is Action.ADMIT:  # a slot freed meanwhile
                decision = dataclasses.replace(again, queued_s=waited)
                break
            if outcome is Outcome.SPILL_DUE and again.action is not Action.SPILL:
                self.queue.requeue(ticket)  # the latest spill time passed with nowhere to spill: wait on
                continue
            if again.action is Action.QUEUE:  # cannot happen with queue_room set; never wait twice
                again = dataclasses.replace(again, action=Action.SHED, reason="shed_capacity", retry_after_s=1)
            decision = dataclasses.replace(again, queued_s=waited)
            break
        if self.metrics is not None:
            self.metrics.queue_wait.labels(ask.cluster, PRIORITIES[judgement.priority]).observe(waited)
        self._count(decision, judgement.priority, ask.key)
        return decision

    def _count(self, decision: Decision, priority: int, key: str) -> None:
        metrics = self.metrics
        if metrics is None:
            return
        if decision.reason == "free":  # the hot path: plain ints, exported at scrape time
            metrics.count_free(decision.cluster, key)
            return
        metrics.decisions.labels(decision.cluster, decision.action.value, decision.reason).inc()
        if decision.action is Action.ADMIT:
            metrics.count_admitted(decision.cluster, key)

    def lease(self, cluster: str, key: str = "") -> Lease:
        """The admitted request's :class:`Lease` on ``cluster`` (held by its director while it forwards);
        ``key``: the client key's name (its in-flight count on the cluster, for fair shares)."""
        held = self._inflight.get(cluster)
        if held is None:
            held = self._inflight[cluster] = {}
        held[key] = held.get(key, 0) + 1
        return Lease(self, cluster, key)

    def inflight(self, cluster: str) -> dict[str, int]:
        """Leases not yet returned on ``cluster`` per key name."""
        return dict(self._inflight.get(cluster, {}))

    def finished(self, cluster: str, key: str = "") -> None:
        """A request of ``key`` on ``cluster`` released its in-flight slot: hand the slot to the next waiter."""
        held = self._inflight.get(cluster)
        if held is not None and key in held:
            held[key] -= 1
            if not held[key]:
                del held[key]
        if self.queue.depth(cluster):
            self.queue.release(cluster)


class Lease:
    """An admitted request's claim on its cluster, handed back to the gate exactly once.

    Its holders are the request's exchange until it finishes (``Exchange.finish``, once on every
    path) and each of its attempts (``gateway/attempt.py``: :meth:`hold` when an attempt takes its
    endpoint's slot, :meth:`drop` when it frees it). When the last holder drops, the gate hears
    ``finished(cluster)`` (the next waiter gets the slot): once per admitted request, whether it
    succeeded, failed over, errored or was cancelled, however many attempts it made.
    """

    __slots__ = ("_gate", "cluster", "key", "_holders")

    def __init__(self, gate: AdmissionGate, cluster: str, key: str = "") -> None:
        self._gate, self.cluster, self.key, self._holders = gate, cluster, key, 1

    @property
    def returned(self) -> bool:
        """True once the gate was told."""
        return self._holders == 0

    def hold(self) -> None:
        """One more holder (an attempt's start); nothing once returned."""
        if self._holders:
            self._holders += 1

    def drop(self) -> None:
        """A holder is done; the last one tells the gate (once)."""
        if not self._holders:
            return
        self._holders -= 1
        if not self._holders:
            self._gate.finished(self.cluster, self.key)
