"""The request path's key and quota gate: authenticate, admit, and settle after the answer.

1. :meth:`KeyGate.authenticate`: the key behind ``Authorization`` (401 otherwise).
2. :meth:`KeyGate.admit`: the model must be allowed for the key, and so must every cluster of
   the route the request will take once ``X-Failover-Route`` is applied (403
   ``model_not_allowed``: a key limited to model A never reaches a cluster only model B's route
   holds); a key with an RPM, TPM or budget limit is checked and counted atomically in the
   quota store (429 with ``Retry-After``; ``rate_limit_exceeded`` or ``insufficient_quota``),
   *reserving* the request's estimated tokens and cost (:class:`~gateway.keys.limits.Reservation`:
   prompt estimate plus ``max_tokens``, else the cluster's expected output; priced at the
   dearest cluster of the route), so concurrent requests cannot all pass a limit that only
   one of them fits. Keys without limits never touch the store on the way in.
3. :meth:`KeyGate.settle`: when the request ends, its tokens, cost and outcome go to a bounded
   queue; a background task (:meth:`run`) writes them in batches (gathered for
   ``quotas.settle_interval_s``, so a busy replica makes one store call per interval): the difference between the
   actual and the reserved tokens and cost (in the window and period of the admission), usage
   records per key, model and cluster. A request whose usage is unknown although an endpoint
   served it (a stream without ``include_usage``, a client that left) keeps its reservation as
   its charge. A full queue drops the record and counts it.

When the store is unreachable, ``quotas.on_store_error`` decides. The default, ``allow``, fails
open: an outage of the shared store must not take inference down with it, and every request
admitted that way is counted in ``kvgate_state_store_errors_total{operation="quota_admit"}`` so
the outage is visible and alertable. ``deny`` fails closed with 503 ``state_store_unavailable``
for metered keys, for deployments where overspend is worse than downtime.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gateway.errors import PermissionDeniedError, RateLimitError, StateStoreError
from gateway.keys.limits import MICRO_USD, Reservation, Verdict, estimate_prompt_tokens
from gateway.keys.model import KeyRecord
from gateway.keys.pricing import TokenUsage
from gateway.keys.quota_store import QuotaStore, Settlement
from gateway.keys.table import ANONYMOUS, KeyTable
from gateway.state.base import raise_if_cancelling

log = logging.getLogger("kvgate.keys")

_BATCH = 256


class ModelNames(Protocol):
    """What the gate reads of the model catalog (``selection/catalog.py``'s ``ModelCatalog``)."""

    def alias_of(self, model: str) -> str | None:
        """The public model name ``model`` is an alias of; None for any other name."""

    def clusters_of(self, models: frozenset[str]) -> frozenset[str]:
        """Every cluster the routes of ``models`` hold (failover chains included)."""


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class Admission:
    """An admitted request: its key, the tokens reserved against its TPM limit and the micro-USD
    reserved against its budget, and when (Unix s; the window and period the reservation is in)."""

    key: KeyRecord
    reserved: int = 0
    reserved_micro_usd: int = 0
    admitted_at: float | None = field(default=None, compare=False)


_MESSAGES = {
    "rpm": "Rate limit reached for requests per minute on key '{name}': limit {limit}. Retry in {wait} s.",
    "tpm": "Rate limit reached for tokens per minute on key '{name}': limit {limit}. Retry in {wait} s.",
    "budget": (
        "Key '{name}' exceeded its budget of ${limit} per {period}, or has too little of it left for this "
        "request's estimated cost (a lower max_tokens reserves less). It resets in {wait} s."
    ),
}


def refusal(key: KeyRecord, verdict: Verdict) -> RateLimitError:
    """The 429 for a refused admission."""
    limits = key.limits
    limit = {"rpm": limits.rpm, "tpm": limits.tpm, "budget": limits.budget_usd}[verdict.limit or "rpm"]
    message = _MESSAGES[verdict.limit or "rpm"].format(
        name=key.name, limit=limit, wait=verdict.retry_after_s, period=limits.budget_period
    )
    code = "insufficient_quota" if verdict.limit == "budget" else "rate_limit_exceeded"
    return RateLimitError(message, code=code, headers={"Retry-After": str(verdict.retry_after_s)})


class KeyGate:
    """Authentication, quotas and usage accounting for one replica."""

    def __init__(
        self,
        table: KeyTable,
        store: QuotaStore,
        *,
        on_store_error: str = "allow",
        store_errors: Callable[[str], None] = lambda operation: None,
        quota_refusals: Callable[[KeyRecord, str], None] = lambda key, limit: None,
        wall_clock: Callable[[], float] = time.time,
        queue_size: int = 10_000,
        catalog: ModelNames | None = None,
        settle_interval_s: float = 0.0,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.table = table
        self._catalog = catalog  # aliases, and the clusters the allowed names' routes hold
        self.store = store
        self._fail_open = on_store_error == "allow"
        self._store_errors = store_errors
        self._refusals = quota_refusals
        self._now = wall_clock
        # a deque and one waiter, not an asyncio.Queue: settle runs on every request (~2 us less)
        self._queue: collections.deque[Settlement] = collections.deque()
        self._queue_size = queue_size
        self._wakeup: asyncio.Future[None] | None = None  # the writer's, while it waits for work
        self._store_down = False  # log the first failure and the recovery, not every request
        self._lost = 0  # settlements lost since the store last took a batch
        self._interval = settle_interval_s  # the writer lets a batch gather this long (one store call per interval)
        self._sleep = sleep

    def now(self) -> float:
        """Unix time from the injected wall clock (quota windows, usage days)."""
        return self._now()

    def authenticate(self, authorization: str | None) -> KeyRecord:
        """Raises AuthenticationError (401)."""
        return self.table.authenticate(authorization)

    async def admit(
        self,
        key: KeyRecord,
        model: str,
        body_bytes: int,
        clusters: Sequence[str] = (),
        estimate: Callable[[], Reservation] | None = None,
    ) -> Admission:
        """Check the key's model list and quotas, counting the request if admitted.

        ``clusters``: the route the request will take (after ``X-Failover-Route``); each must be
        reachable from the key's allowed models. ``estimate``: the request's reservation, asked
        only for a key with a TPM or budget limit (default: ``body_bytes / 4`` tokens, no cost).

        Raises:
            PermissionDeniedError: (403) the key may not use ``model`` or a cluster of the route.
            RateLimitError: (429, ``Retry-After``) a limit is exhausted.
            StateStoreError: (503) the store failed and ``quotas.on_store_error = "deny"``.
        """
        limits = key.limits
        if not limits.allows(model, None if self._catalog is None or limits.models is None else self._catalog.alias_of(model)):
            raise PermissionDeniedError(
                f"The key '{key.name}' may not use the model `{model}`.", param="model"
            )
        if limits.models is not None and clusters and self._catalog is not None:
            self._check_clusters(key, model, clusters)
        if not limits.metered:
            return Admission(key)
        reserve, cost = 0, 0
        if limits.tpm is not None or limits.budget_usd is not None:
            found = estimate() if estimate is not None else Reservation(estimate_prompt_tokens(body_bytes), 0)
            reserve = found.tokens if limits.tpm is not None else 0
            cost = found.micro_usd if limits.budget_usd is not None else 0
        now = self._now()
        try:
            verdict = await self.store.admit(key.id, limits, now, reserve, cost)
        except StateStoreError as error:
            self._store_errors("quota_admit")
            if not self._store_down:
                mode = "allow" if self._fail_open else "deny"
                log.warning("quota store unreachable (quotas.on_store_error = %s): %s", mode, error.message)
            self._store_down = True
            if self._fail_open:
                return Admission(key)
            raise StateStoreError("Quota checks are unavailable; try again shortly.", headers={"Retry-After": "1"}) from None
        if self._store_down:
            log.info("quota store reachable again")
            self._store_down = False
        if not verdict.allowed:
            self._refusals(key, verdict.limit or "rpm")
            raise refusal(key, verdict)
        return Admission(key, reserve, cost, now)

    def _check_clusters(self, key: KeyRecord, model: str, clusters: Sequence[str]) -> None:
        assert self._catalog is not None and key.limits.models is not None
        allowed = self._catalog.clusters_of(key.limits.models)
        for cluster in clusters:
            if cluster not in allowed:
                raise PermissionDeniedError(
                    f"The key '{key.name}' may not use the cluster `{cluster}`: it serves no model the key may "
                    f"use (the route of `{model}` after X-Failover-Route).",
                    param="X-Failover-Route",
                )

    def settle(
        self,
        admission: Admission,
        model: str,
        cluster: str,
        ok: bool,
        tokens: TokenUsage | None,
        cost_usd: float,
        *,
        charge_estimate: bool = False,
    ) -> None:
        """Queue the finished request's accounting (never blocks, never raises).

        ``charge_estimate``: the usage is unknown but an endpoint served the request: the
        reservation stays counted as its charge instead of being returned.
        """
        key = admission.key
        if key is ANONYMOUS:
            return
        tokens = tokens or TokenUsage()
        keep = charge_estimate
        item = Settlement(  # positional, in the fields' order (13 keywords cost ~1 us more per request)
            key.id,  # key_id
            key.limits,  # limits
            self._now(),  # now
            0 if keep else admission.reserved,  # reserved
            model,  # model
            cluster or "-",  # cluster
            ok,  # ok
            tokens.input,  # input_tokens
            tokens.cached,  # cached_tokens
            tokens.output,  # output_tokens
            round(cost_usd * MICRO_USD),  # cost_micro_usd
            0 if keep else admission.reserved_micro_usd,  # reserved_micro_usd
            admission.admitted_at,  # admitted_at
        )
        if len(self._queue) >= self._queue_size:
            self._store_errors("usage_queue_full")
            return
        self._queue.append(item)
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    async def _write(self, batch: list[Settlement]) -> None:
        try:
            await self.store.settle(batch)
        except StateStoreError as error:
            self._store_errors("usage_settle")
            if not self._lost:  # one line per outage, not one per batch (per request at low traffic)
                log.warning("usage records lost (%d so far; counted, logged again on recovery): %s", len(batch), error.message)
            self._lost += len(batch)
            return
        if self._lost:
            log.info("usage settlement recovered; %d usage records were lost during the outage", self._lost)
            self._lost = 0

    def _take(self, batch: list[Settlement]) -> list[Settlement]:
        queue = self._queue
        while len(batch) < _BATCH and queue:
            batch.append(queue.popleft())
        return batch

    @property
    def queued(self) -> int:
        """Settlements waiting to be written."""
        return len(self._queue)

    async def flush(self) -> None:
        """Write everything queued now."""
        while self._queue:
            await self._write(self._take([]))

    async def run(self) -> None:
        """Write queued settlements in batches until cancelled.

        redis-py (7.4) can swallow a cancellation that arrives during a pipeline's ``execute``:
        :func:`~gateway.state.base.raise_if_cancelling` after each write.
        """
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                self._wakeup = loop.create_future()
                try:
                    await self._wakeup
                finally:
                    self._wakeup = None
            if self._interval > 0 and len(self._queue) < _BATCH:
                await self._sleep(self._interval)  # gather a batch: one pipeline per interval, not per request
            batch = self._take([])
            if batch:  # flush() may have written it meanwhile
                await self._write(batch)
            raise_if_cancelling(task)
