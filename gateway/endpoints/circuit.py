"""A circuit breaker per endpoint: a pure state machine over request outcomes and a clock.

States (after Nygard, "Release It!", and Envoy's outlier detection):

``closed``
    Requests flow. The breaker *trips* (-> ``open``) when either
    ``consecutive_failures`` failures arrive in a row, or, once at least ``min_requests``
    outcomes fall in the sliding window of ``window_s`` seconds, their failure ratio reaches
    ``failure_ratio``.
``open``
    No requests for ``cooldown_s`` seconds. ``retry_at`` tells when the endpoint may be tried
    again (kvgate's 503 ``Retry-After`` is the earliest ``retry_at`` of a route).
``half_open``
    After the cooldown, exactly one probe request is let through (``allow()`` hands out one
    permit). Its success closes the breaker and clears the window; its failure re-opens it with
    the cooldown doubled, capped at ``max_cooldown_s``.

Only failures of the endpoint count: connection errors, timeouts, 5xx, 408/429, broken or
in-band-error streams. A client's 4xx or a client disconnect is recorded as neither.
The clock (seconds, monotonic) is injected; nothing here sleeps or does I/O.
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Callable
from dataclasses import dataclass


class CircuitState(enum.Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class BreakerPolicy:
    """Thresholds of a breaker; see the module docstring. Times in seconds."""

    consecutive_failures: int = 5
    failure_ratio: float = 0.5
    min_requests: int = 20
    window_s: float = 30.0
    cooldown_s: float = 5.0
    max_cooldown_s: float = 60.0


class CircuitBreaker:
    """One endpoint's breaker. Not thread-safe; event-loop use only."""

    __slots__ = ("_policy", "_clock", "state", "_consecutive", "_window", "_opened_at", "_cooldown", "_probe_out")

    def __init__(self, policy: BreakerPolicy, clock: Callable[[], float]) -> None:
        self._policy = policy
        self._clock = clock
        self.state = CircuitState.CLOSED
        self._consecutive = 0
        self._window: collections.deque[tuple[float, bool]] = collections.deque()
        self._opened_at = 0.0
        self._cooldown = policy.cooldown_s
        self._probe_out = False

    @property
    def retry_at(self) -> float:
        """Clock time from which a request may be tried (now or earlier when closed)."""
        if self.state is CircuitState.OPEN:
            return self._opened_at + self._cooldown
        return self._clock()

    def available(self) -> bool:
        """Whether a request could be let through now (does not take the half-open permit)."""
        self._advance()
        return self.state is CircuitState.CLOSED or (self.state is CircuitState.HALF_OPEN and not self._probe_out)

    def allow(self) -> bool:
        """Take permission for one request: always when closed, one probe when half-open."""
        self._advance()
        if self.state is CircuitState.CLOSED:
            return True
        if self.state is CircuitState.HALF_OPEN and not self._probe_out:
            self._probe_out = True
            return True
        return False

    def release_probe(self) -> None:
        """The permitted request ended as neither success nor failure (client left, 4xx)."""
        self._probe_out = False

    def record_success(self) -> None:
        now = self._clock()
        if self.state is CircuitState.HALF_OPEN:
            self._close()
            return
        self._consecutive = 0
        self._push(now, ok=True)

    def record_failure(self) -> None:
        now = self._clock()
        if self.state is CircuitState.HALF_OPEN:
            self._open(now, self._cooldown * 2)
            return
        if self.state is CircuitState.OPEN:
            return
        self._consecutive += 1
        self._push(now, ok=False)
        if self._consecutive >= self._policy.consecutive_failures or self._ratio_tripped():
            self._open(now, self._policy.cooldown_s)

    def _advance(self) -> None:
        if self.state is CircuitState.OPEN and self._clock() >= self._opened_at + self._cooldown:
            self.state = CircuitState.HALF_OPEN
            self._probe_out = False

    def _push(self, now: float, ok: bool) -> None:
        self._window.append((now, ok))
        horizon = now - self._policy.window_s
        while self._window and self._window[0][0] < horizon:
            self._window.popleft()

    def _ratio_tripped(self) -> bool:
        total = len(self._window)
        if total < self._policy.min_requests:
            return False
        failures = sum(1 for _, ok in self._window if not ok)
        return failures / total >= self._policy.failure_ratio

    def _open(self, now: float, cooldown: float) -> None:
        self.state = CircuitState.OPEN
        self._opened_at = now
        self._cooldown = min(cooldown, self._policy.max_cooldown_s)
        self._probe_out = False

    def _close(self) -> None:
        self.state = CircuitState.CLOSED
        self._consecutive = 0
        self._window.clear()
        self._cooldown = self._policy.cooldown_s
        self._probe_out = False
