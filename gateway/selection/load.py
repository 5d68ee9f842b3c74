"""Live cluster state for route selection: predicted TTFT, load, error rate, output length.

**Predicted TTFT** of a new request on a cluster is ``base + wait``:

* ``wait`` (queueing) from the queue depth now. Each routable endpoint ``e`` holds
  ``occupancy_e = max(in_flight_e, running_e + waiting_e)`` requests: this replica's in-flight
  count, or the engine's own counts from its last scrape when they are fresh (they include other
  replicas' requests). It serves ``n = slots_per_endpoint * weight_e`` at once, so a new request
  must wait until ``a = occupancy_e + 1 - n`` of the requests ahead of it finish (none when
  ``a <= 0``). The running requests' remaining times are taken as uniform on ``[0, service]``
  (the residual life of requests that started at random moments), so the wait for the
  ``k``-th of ``n`` slots to free is ``service`` times the ``k``-th order statistic of ``n``
  uniforms, a Beta(k, n - k + 1) variable; a request ``a`` deep waits ``(a - 1) // n`` whole
  service rounds plus that order statistic for ``k = (a - 1) % n + 1``. The wait is its
  ``quantile`` (``[route_selection] wait_quantile``, 0.99 by default: a TTFT limit is meant for
  the tail, and the mean wait of one request queued behind four slots is a fifth of a service
  time while its p99 is more than two thirds). The cluster's wait is the smallest ``wait_e``
  (the scheduler prefers idle endpoints).
* ``base`` from recent latency: an EWMA (alpha 0.2) of the measured TTFT of streamed requests
  that were predicted not to queue. ``service`` is an EWMA of the time a request holds its slot:
  ``e2e - ttft + base`` for streamed requests, ``e2e`` for others predicted not to queue.
  Before any measurement both are the cluster's priors (``[clusters.NAME.selection]``).

**Load** is ``min_e (occupancy_e + 1) / slots_e``: the busy share of the least busy endpoint's
slots if the request went there (1.0 = the request would be the last one served at once).

**Error rate**: an EWMA (alpha 0.1) over finished requests (1 for an upstream error, 0 for a
success; client errors and cancels are not counted). **Routable** endpoints pass health checks,
are not draining and their circuit breaker is not open.

**Output tokens**: an EWMA (alpha 0.2) of the completion tokens of successful answers that
report usage, from ``expected_output_tokens`` at first; it prices the cost estimate.

One :class:`LoadTracker` per app, used from the event loop only; views are immutable snapshots.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache

from gateway.endpoints.model import Endpoint
from gateway.endpoints.stats import Scrape
from gateway.keys.pricing import Price

ALPHA = 0.2
ERROR_ALPHA = 0.1


@dataclass(frozen=True, slots=True)
class ClusterProfile:
    """What config says about a cluster, as route selection needs it (times in seconds)."""

    name: str
    tier: str | None = None
    price: Price = Price()
    max_context_tokens: int | None = None
    thinking_switch: str = "none"
    slots_per_endpoint: int = 16
    ttft_prior_s: float = 0.5
    service_prior_s: float = 20.0
    expected_output_tokens: float = 500.0
    chars_per_token: float | None = None


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class ClusterView:
    """A cluster's profile and its live state at one instant (see the module docstring)."""

    profile: ClusterProfile
    routable: int = 1
    load: float = 0.0
    wait_s: float = 0.0
    base_ttft_s: float = 0.5
    error_rate: float = 0.0
    output_tokens: float = 500.0

    @property
    def name(self) -> str:
        return self.profile.name

    @property
    def tier(self) -> str | None:
        return self.profile.tier

    @property
    def predicted_ttft_s(self) -> float:
        return self.base_ttft_s + self.wait_s


def occupancy(endpoint: Endpoint, scrape: Scrape | None) -> float:
    """Requests at ``endpoint``: its in-flight count, or the engine's running + waiting if more."""
    local = float(endpoint.in_flight)
    if scrape is None:
        return local
    engine = (scrape.stats.running or 0.0) + (scrape.stats.waiting or 0.0)
    return max(local, engine)


def _binomial_tail(k: int, n: int, x: float) -> float:
    """P(Binomial(n, x) >= k): the chance that the k-th of n uniforms is at most x."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    pmf, below, ratio = (1.0 - x) ** n, 0.0, x / (1.0 - x)
    for j in range(k):
        below += pmf
        pmf *= (n - j) / (j + 1) * ratio
    return 1.0 - below


@lru_cache(maxsize=4096)
def order_quantile(k: int, n: int, quantile: float) -> float:
    """The ``quantile`` of the k-th smallest of n uniforms on [0, 1] (bisection, 1e-6)."""
    low, high = 0.0, 1.0
    while high - low > 1e-6:
        middle = (low + high) / 2
        if _binomial_tail(k, n, middle) >= quantile:
            high = middle
        else:
            low = middle
    return high


def slot_wait(ahead: int, slots: int, service_s: float, quantile: float) -> float:
    """Seconds until a request ``ahead`` deep in the queue gets one of ``slots`` slots."""
    if ahead <= 0:
        return 0.0
    rounds, k = divmod(ahead - 1, slots)
    return service_s * (rounds + order_quantile(k + 1, slots, quantile))


def queue_wait(occupancies: Iterable[tuple[float, float]], service_s: float, quantile: float = 0.99) -> tuple[float, float]:
    """``(wait_s, load)`` of a new request over ``(occupancy, slots)`` pairs of routable endpoints.

    With no routable endpoint: ``(inf, inf)``.
    """
    best_wait = best_load = math.inf
    for occupied, slots in occupancies:
        load = (occupied + 1.0) / slots
        if load < best_load:
            best_load = load
        if best_wait:  # a wait of 0 cannot be beaten
            ahead = math.ceil(occupied + 1.0 - slots - 1e-9)
            wait = slot_wait(ahead, max(1, round(slots)), service_s, quantile) if ahead > 0 else 0.0
            if wait < best_wait:
                best_wait = wait
    return best_wait, best_load


@dataclass(slots=True)
class _Estimates:
    base_s: float
    service_s: float
    error_rate: float
    output_tokens: float


def _ewma(old: float, new: float, alpha: float) -> float:
    return old + alpha * (new - old)


class LoadTracker:
    """Per-cluster latency, error and output-length estimates (see the module docstring)."""

    def __init__(self) -> None:
        self._estimates: dict[str, _Estimates] = {}

    def _for(self, profile: ClusterProfile) -> _Estimates:
        found = self._estimates.get(profile.name)
        if found is None:
            found = _Estimates(profile.ttft_prior_s, profile.service_prior_s, 0.0, profile.expected_output_tokens)
            self._estimates[profile.name] = found
        return found

    def service_s(self, profile: ClusterProfile) -> float:
        """The cluster's service time now (the EWMA of request durations, the prior until measured), s."""
        return self._for(profile).service_s

    def base_ttft_s(self, profile: ClusterProfile) -> float:
        """The cluster's TTFT of a request that did not queue (the EWMA, the prior until measured), s."""
        return self._for(profile).base_s

    def view(
        self,
        profile: ClusterProfile,
        endpoints: Iterable[Endpoint],
        fresh_scrape: Callable[[str], Scrape | None] = lambda name: None,
        quantile: float = 0.99,
    ) -> ClusterView:
        """The cluster's state now. ``fresh_scrape(name)``: an endpoint's scrape if not stale."""
        estimates = self._for(profile)
        per_endpoint = profile.slots_per_endpoint
        pairs = []
        for e in endpoints:
            if e.routable:
                spec = e.spec
                occupied = float(e.in_flight)  # occupancy(e, scrape), inlined: this runs per endpoint per request
                scrape = fresh_scrape(spec.name)
                if scrape is not None:
                    stats = scrape.stats
                    engine = (stats.running or 0.0) + (stats.waiting or 0.0)
                    if engine > occupied:
                        occupied = engine
                pairs.append((occupied, per_endpoint * spec.weight))
        wait, load = queue_wait(pairs, estimates.service_s, quantile)
        return ClusterView(
            profile, len(pairs), load, wait, estimates.base_s, estimates.error_rate, estimates.output_tokens
        )

    def observe(
        self,
        profile: ClusterProfile,
        *,
        ok: bool,
        wait_s: float,
        ttft_s: float | None,
        e2e_s: float | None,
        output_tokens: int | None,
    ) -> None:
        """Fold in one finished request served by the cluster (``wait_s``: predicted at dispatch)."""
        estimates = self._for(profile)
        estimates.error_rate = _ewma(estimates.error_rate, 0.0 if ok else 1.0, ERROR_ALPHA)
        if not ok:
            return
        unqueued = wait_s == 0.0
        if ttft_s is not None and unqueued:
            estimates.base_s = _ewma(estimates.base_s, ttft_s, ALPHA)
        if e2e_s is not None and ttft_s is not None:
            estimates.service_s = _ewma(estimates.service_s, max(1e-3, e2e_s - ttft_s + estimates.base_s), ALPHA)
        elif e2e_s is not None and unqueued:
            estimates.service_s = _ewma(estimates.service_s, max(1e-3, e2e_s), ALPHA)
        if output_tokens:
            estimates.output_tokens = _ewma(estimates.output_tokens, float(output_tokens), ALPHA)

    def forget(self, cluster: str) -> None:
        """Drop a cluster's estimates (it left the configuration)."""
        self._estimates.pop(cluster, None)
