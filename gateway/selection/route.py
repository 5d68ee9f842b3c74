"""The route: the ordered plan of clusters one request may be served by (primary, then failover chain).

Route selection (``selection/selector.py``, ``selection/catalog.py``) builds it; the director
(``gateway/proxy.py``) walks it; ``gateway/failover.py`` applies ``X-Failover-Route`` to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import TimeoutSettings


@dataclass(frozen=True, slots=True)
class Route:
    """An ordered plan: ``clusters[0]`` is the primary, the rest the failover chain.

    Attributes:
        name: the route's name (a ``[routes.NAME]`` entry, or a cluster name for one-cluster routes).
        clusters: cluster names, tried in order.
        failover: False when failover is disabled for this request (one attempt only).
        reason: why this route was chosen (echoed in the ``x-kvgate-route`` header).
        timeouts: the attempt time limits on this route.
        spill_to: clusters of the chain that take the overflow when the primary is saturated
            (``[routes.NAME] spill_to``; admission, ``gateway/admission/``).
        max_queue_wait_s: admission's wait limit on this route, s (None: ``[admission]``'s).
    """

    name: str
    clusters: tuple[str, ...]
    failover: bool = True
    reason: str = "model"
    timeouts: TimeoutSettings = TimeoutSettings()
    spill_to: tuple[str, ...] = ()
    max_queue_wait_s: float | None = None
