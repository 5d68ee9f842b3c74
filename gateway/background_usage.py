"""Background Responses charged with their real usage once they end (``background: true``).

A ``POST /v1/responses`` with ``background: true`` is answered at once (``status: queued``,
``usage: null``) and generated afterwards on its endpoint. Its key's quota is reserved at the
create as any request's (prompt estimate + ``max_output_tokens``, ``gateway/keys/limits.py``);
its exchange (``gateway/exchange.py``) is left open, and :class:`BackgroundUsage` (one per app)
finishes it with the real usage when the response reaches a terminal status (``completed``,
``incomplete``, ``failed``, ``cancelled``), so the close-out (metrics, cost with cached tokens at
the cached price, the key's settlement, the per-request record) sees that usage. Whichever sees
the terminal status first settles it:

- the poller: ``GET /v1/responses/{id}`` on the endpoint that holds it, first ``poll_s`` after the
  create, then with the interval doubled up to :data:`MAX_INTERVAL_S`, for at most ``max_s`` in
  all (``[state] background_poll_s`` 1.0 and ``background_max_s`` 3600);
- a client's retrieve or cancel through this replica whose answer shows it (:meth:`offer`).

Exactly once per id: the open exchange is taken from the pending table by whoever settles it (a
later sighting finds nothing). The poller gives up (the exchange finishes without usage, so the
reservation stays counted as the charge: the close-out's rule for an answer whose usage is
unknown) when ``max_s`` has passed, when the endpoint answers 404 (it restarted: the response
is gone), after :data:`MAX_FAILURES` failed polls in a row, or when the app stops
(:meth:`aclose`, which cancels every poller first). A poll is bounded by :data:`POLL_TIMEOUT_S`.
At most :data:`MAX_PENDING` are polled at once per replica (a create past it keeps its
reservation as its charge). The request's E2E latency ends when the create is answered
(:meth:`~gateway.exchange.Exchange.answered`), not when the background run ends. Only the
replica that took the create holds its exchange; its own poller settles it even when
the client retrieves through another replica.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import orjson

from gateway.deadlines import deadline
from gateway.errors import GatewayError
from gateway.exchange import SUCCESS, Exchange
from gateway.protocol.responses import usage_of
from gateway.protocol.typed_events import openai_usage

if TYPE_CHECKING:
    from gateway.endpoints.model import Endpoint
    from gateway.upstream.client import Upstream

TERMINAL = frozenset(("completed", "incomplete", "failed", "cancelled"))
MAX_INTERVAL_S = 30.0
MAX_FAILURES = 5
POLL_TIMEOUT_S = 10.0
MAX_PENDING = 10_000  # open background exchanges per replica; past it a create is charged its reservation


class BackgroundUsage:
    """Open exchanges of background responses, settled once with their real usage (module doc).

    ``upstream``: how the holding endpoint is polled (``request("GET", ...)``); ``poll_s``: the
    first interval, seconds; ``max_s``: the most seconds a response is polled; ``clock``:
    monotonic seconds; ``sleep``: how an interval is waited (tests inject one); ``max_pending``: the
    most responses polled at once (:data:`MAX_PENDING`); a create beyond it is finished at once, its
    reservation kept as its charge (counted in ``gave_up``).
    """

    def __init__(
        self, upstream: Upstream, *, poll_s: float, max_s: float, clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, max_pending: int = MAX_PENDING,
    ) -> None:
        self._upstream = upstream
        self._max_pending = max_pending
        self._poll_s = poll_s
        self._max_s = max_s
        self._clock = clock
        self._sleep = sleep
        self._pending: dict[str, tuple[Exchange, asyncio.Task[None] | None]] = {}
        self._closed = False
        self.settled = 0  # exchanges finished with the real usage
        self.gave_up = 0  # finished without it (the reservation kept as the charge)

    def __contains__(self, response_id: object) -> bool:
        return response_id in self._pending

    def watch(self, response_id: str, exchange: Exchange, endpoint: Endpoint) -> None:
        """Keep ``exchange`` open until ``response_id`` (stored on ``endpoint``) ends; poll it."""
        if self._closed or response_id in self._pending:
            exchange.finish(SUCCESS)
            return
        if len(self._pending) >= self._max_pending:  # bounded: the reservation stays as the charge
            self.gave_up += 1
            exchange.finish(SUCCESS)
            return
        exchange.answered()  # its latency is the create's; the background run is not a request's E2E
        self._pending[response_id] = (exchange, None)
        task = asyncio.get_running_loop().create_task(self._poll(response_id, endpoint))
        self._pending[response_id] = (exchange, task)

    def offer(self, response: Any) -> bool:
        """A response object a client's retrieve or cancel received: settle its exchange if it is
        pending and the status is terminal. True if this call settled it."""
        if not isinstance(response, dict) or response.get("status") not in TERMINAL:
            return False
        response_id = response.get("id")
        if not isinstance(response_id, str) or response_id not in self._pending:
            return False
        self._settle(response_id, response)
        return True

    def _settle(self, response_id: str, response: dict[str, Any] | None) -> None:
        exchange, task = self._pending.pop(response_id, (None, None))
        if exchange is None:
            return
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        tokens = usage_of(response) if response is not None else None
        if tokens is None:
            self.gave_up += 1
            exchange.finish(SUCCESS)
            return
        self.settled += 1
        exchange.finish(SUCCESS, usage=openai_usage(tokens))

    async def _poll(self, response_id: str, endpoint: Endpoint) -> None:
        interval, failures = self._poll_s, 0
        ends_at = self._clock() + self._max_s
        while (left := ends_at - self._clock()) > 0 and failures < MAX_FAILURES:
            await self._sleep(min(interval, left))
            interval = min(interval * 2, MAX_INTERVAL_S)
            status, response = await self._get(endpoint, response_id)
            if status == 404:
                break
            if response is None:
                failures += 1
                continue
            failures = 0
            if response.get("status") in TERMINAL:
                self._settle(response_id, response)
                return
        self._settle(response_id, None)

    async def _get(self, endpoint: Endpoint, response_id: str) -> tuple[int, dict[str, Any] | None]:
        """(status, the response object) of one poll; (0, None) when it failed."""
        spec = endpoint.spec
        headers = {"Accept-Encoding": "identity"}
        if spec.api_key:
            headers["Authorization"] = f"Bearer {spec.api_key}"
        try:
            with deadline(POLL_TIMEOUT_S):
                answer = await self._upstream.request("GET", f"{spec.base_url}/responses/{response_id}", b"",
                                                      headers, POLL_TIMEOUT_S)
                raw = await answer.read()
        except (GatewayError, TimeoutError, OSError):
            return 0, None
        if answer.status != 200:
            return answer.status, None
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return 200, None
        return 200, parsed if isinstance(parsed, dict) else None

    async def aclose(self) -> None:
        """Stop every poller; their exchanges finish without usage (the reservation is the charge)."""
        self._closed = True
        tasks = [task for _, task in self._pending.values() if task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for response_id in list(self._pending):
            self._settle(response_id, None)
