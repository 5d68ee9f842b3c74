"""Saturation of a cluster: the predicted wait before any of its endpoints could start a new request.

Pure; the load model is route selection's (``gateway/selection/load.py``), reused, not copied:

* each routable endpoint holds ``occupancy`` requests (:func:`gateway.selection.load.occupancy`:
  the gateway's own in-flight count, or the engine's ``running + waiting`` from a fresh scrape
  when that is more) and serves ``slots = slots_per_endpoint * weight`` at once;
* the cluster is one multi-server queue over its routable endpoints (the scheduler spreads the
  load): a new request behind ``queued`` gateway waiters is ``ahead = ceil(sum(occupancy) +
  queued + 1 - sum(slots))`` deep, and waits :func:`gateway.selection.load.slot_wait` (the
  ``quantile`` of the order statistic of residual service times; with one endpoint and no
  waiters this is exactly the load model's ``queue_wait``). Wait 0: it can start now;
* **engine confirmation**: a fresh scrape whose engine has nobody waiting and a KV cache under
  ``kv_saturated`` makes the endpoint ``open``: the engine itself says it has room, so the
  cluster is not saturated whatever the slot count predicts (a request may still queue briefly
  in the gateway, never be shed or spilled). Waiting requests, a full cache, or the gateway's own
  in-flight count at the endpoint's slots (the gateway is holding the overflow, so the engine
  cannot show anyone waiting) make it ``full``;
  without a fresh scrape (a managed provider) it is ``unmeasured`` and the load model alone
  speaks;
* **saturated**: the predicted wait is over the route's wait limit and no endpoint is open (the
  issue's definition: no endpoint can start the request within ``max_queue_wait``);
* **drain** time: the same order statistic at ``drain_quantile`` (the median by default): when
  the request's place is expected to come up, the ``Retry-After`` of a shed.

Times are seconds. A cluster with no routable endpoint has wait ``inf`` and is not saturated:
that is failover's business (``NoHealthyEndpointError``), not admission's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gateway.endpoints.model import Endpoint
from gateway.endpoints.stats import Scrape
from gateway.selection.load import occupancy, slot_wait


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class EndpointLoad:
    """One routable endpoint at one instant.

    Attributes:
        occupancy: requests it holds (in-flight, or the engine's running + waiting if more).
        slots: requests it serves at once (``slots_per_endpoint * weight``, > 0).
        engine: ``"open"`` (fresh metrics: nobody waiting, cache not full), ``"full"`` (fresh
            metrics: requests waiting or cache full) or ``"unmeasured"`` (no fresh scrape).
    """

    occupancy: float
    slots: float
    engine: str = "unmeasured"


@dataclass(slots=True)  # made per request, never changed: not frozen
class Saturation:
    """A cluster's admission state for one new request (see the module docstring).

    Attributes:
        cluster: the cluster's name.
        wait_s: predicted wait before it could start (``quantile``); ``inf``: no routable endpoint.
        drain_s: expected time until its place comes up (``drain_quantile``), for ``Retry-After``.
        saturated: wait over the limit and no endpoint's engine says it has room.
        measured: at least one routable endpoint had fresh engine metrics.
        routable: routable endpoints counted.
    """

    cluster: str
    wait_s: float
    drain_s: float
    saturated: bool
    measured: bool
    routable: int

    @property
    def can_start_now(self) -> bool:
        """True when an endpoint has a free slot (predicted wait 0)."""
        return self.wait_s == 0.0


def endpoint_load(
    endpoint: Endpoint, scrape: Scrape | None, slots_per_endpoint: int, kv_saturated: float
) -> EndpointLoad:
    """The :class:`EndpointLoad` of a routable ``endpoint`` given its fresh ``scrape`` (or None)."""
    slots = slots_per_endpoint * endpoint.spec.weight
    occupied = occupancy(endpoint, scrape)
    if scrape is None:
        return EndpointLoad(occupied, slots)
    stats = scrape.stats
    full = (stats.waiting or 0.0) > 0.0 or (stats.kv_usage is not None and stats.kv_usage >= kv_saturated)
    # An engine held at its slot count by the gateway never shows anyone waiting (the gateway holds
    # them): its "nobody waiting" says nothing then, so it is open only below its slots.
    held = endpoint.in_flight >= slots
    return EndpointLoad(occupied, slots, "full" if full or held else "open")


def endpoint_loads(
    endpoints: Iterable[Endpoint],
    fresh_scrape: Callable[[str], Scrape | None],
    slots_per_endpoint: int,
    kv_saturated: float = 0.95,
) -> list[EndpointLoad]:
    """:func:`endpoint_load` of every routable endpoint; ``fresh_scrape(name)`` is None when stale."""
    return [
        endpoint_load(e, fresh_scrape(e.spec.name), slots_per_endpoint, kv_saturated) for e in endpoints if e.routable
    ]


def cluster_saturation(
    cluster: str,
    loads: Iterable[EndpointLoad],
    *,
    service_s: float,
    limit_s: float,
    queued: int = 0,
    quantile: float = 0.99,
    drain_quantile: float = 0.5,
) -> Saturation:
    """The cluster's :class:`Saturation` for a request behind ``queued`` gateway waiters.

    ``service_s``: the load model's service time of the cluster (the tracker's EWMA, s);
    ``limit_s``: the route's wait limit (``max_queue_wait_s``).
    """
    occupied = slots = 0.0
    routable = 0
    measured = is_open = False
    for load in loads:
        routable += 1
        occupied += load.occupancy
        slots += max(load.slots, 1e-9)
        measured = measured or load.engine != "unmeasured"
        is_open = is_open or load.engine == "open"
    if routable == 0:
        return Saturation(cluster, math.inf, math.inf, False, False, 0)
    ahead = math.ceil(occupied + queued + 1.0 - slots - 1e-9)
    servers = max(1, round(slots))
    wait = slot_wait(ahead, servers, service_s, quantile)
    drain = slot_wait(ahead, servers, service_s, drain_quantile)
    return Saturation(cluster, wait, drain, wait > limit_s and not is_open, measured, routable)
