"""The request path's key and quota gate: authenticate, admit, and settle after the answer.

1. :meth:`KeyGate.authenticate`: the key behind ``Authorization`` (401 otherwise).
2. :meth:`KeyGate.admit`: the model must be allowed for the key (403 ``model_not_allowed``);
   a key with an RPM, TPM or budget limit is checked and counted atomically in the quota store
   (429 with ``Retry-After``; ``rate_limit_exceeded`` or ``insufficient_quota``). Keys without
   limits never touch the store on the way in.
3. :meth:`KeyGate.settle`: when the request ends, its tokens, cost and outcome go to a bounded
   queue; a background task (:meth:`run`) writes them in batches (TPM correction, spend, usage
   records per key, model and cluster). A full queue drops the record and counts it.

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
from collections.abc import Callable
from dataclasses import dataclass

from gateway.errors import PermissionDeniedError, RateLimitError, StateStoreError
from gateway.keys.limits import MICRO_USD, Verdict, estimate_prompt_tokens
from gateway.keys.model import KeyRecord
from gateway.keys.pricing import TokenUsage
from gateway.keys.quota_store import QuotaStore, Settlement
from gateway.keys.table import ANONYMOUS, KeyTable
from gateway.state.base import raise_if_cancelling

log = logging.getLogger("kvgate.keys")

_BATCH = 256


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class Admission:
    """An admitted request: its key and the tokens reserved against its TPM limit."""

    key: KeyRecord
    reserved: int = 0


_MESSAGES = {
    "rpm": "Rate limit reached for requests per minute on key '{name}': limit {limit}. Retry in {wait} s.",
    "tpm": "Rate limit reached for tokens per minute on key '{name}': limit {limit}. Retry in {wait} s.",
    "budget": "Key '{name}' exceeded its budget of ${limit} per {period}. It resets in {wait} s.",
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
    ) -> None:
        self.table = table
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

    def now(self) -> float:
        """Unix time from the injected wall clock (quota windows, usage days)."""
        return self._now()

    def authenticate(self, authorization: str | None) -> KeyRecord:
        """Raises AuthenticationError (401)."""
        return self.table.authenticate(authorization)

    async def admit(self, key: KeyRecord, model: str, body_bytes: int) -> Admission:
        """Check the key's model list and quotas, counting the request if admitted.

        Raises:
            PermissionDeniedError: (403) the key may not use ``model``.
            RateLimitError: (429, ``Retry-After``) a limit is exhausted.
            StateStoreError: (503) the store failed and ``quotas.on_store_error = "deny"``.
        """
        limits = key.limits
        if not limits.allows(model):
            raise PermissionDeniedError(
                f"The key '{key.name}' may not use the model `{model}`.", param="model"
            )
        if not limits.metered:
            return Admission(key)
        reserve = estimate_prompt_tokens(body_bytes) if limits.tpm is not None else 0
        try:
            verdict = await self.store.admit(key.id, limits, self._now(), reserve)
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
        return Admission(key, reserve)

    def settle(
        self, admission: Admission, model: str, cluster: str, ok: bool, tokens: TokenUsage | None, cost_usd: float
    ) -> None:
        """Queue the finished request's accounting (never blocks, never raises)."""
        key = admission.key
        if key is ANONYMOUS:
            return
        tokens = tokens or TokenUsage()
        item = Settlement(
            key_id=key.id,
            limits=key.limits,
            now=self._now(),
            reserved=admission.reserved,
            model=model,
            cluster=cluster or "-",
            ok=ok,
            input_tokens=tokens.input,
            cached_tokens=tokens.cached,
            output_tokens=tokens.output,
            cost_micro_usd=round(cost_usd * MICRO_USD),
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
            log.warning("usage records lost (%d): %s", len(batch), error.message)

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
            batch = self._take([])
            if batch:  # flush() may have written it meanwhile
                await self._write(batch)
            raise_if_cancelling(task)
