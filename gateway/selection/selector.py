"""[io] Route selection for one request: model name -> route, with a reason, then observation.

:meth:`RouteSelector.select` runs after the body is parsed and the key authenticated:

1. resolve the model name (``selection/catalog.py``; 404 ``model_not_found``);
2. read the limit headers over the key's defaults (``selection/limits.py``; 400 on bad values);
3. snapshot the live state of the clusters involved (``selection/load.py``) at current prices;
4. for ``auto`` only: read the request's signals (``selection/signals.py``) and the key's remaining
   budget (one quota-store read per key per :data:`BUDGET_TTL_S`; a store error means unknown);
5. decide with the pure policy (``selection/policy.py``); ``auto`` gets a route of its own
   (primary, then the failover chain), tier aliases their tier's clusters best first, public
   model names their configured route less clusters that cannot hold the prompt (400
   ``context_length_exceeded`` when none can). A public model name none of whose clusters sets
   ``max_context_tokens`` keeps its route without step 4 (nothing to estimate; ``explain``
   reads the signals when asked);
6. switch thinking off in the body when a reasoning request is downgraded onto a cluster that
   supports it (``selection/rewrite.py``).

The returned :class:`Routed` travels on the exchange (:meth:`attach`, which also counts the
decision in ``kvgate_route_selections_total``); the exchange's close-out (``gateway/closeout.py``)
calls :meth:`finished`, which feeds the serving cluster's load model and counts the request's
cost (priced once, by the close-out) by key.
:meth:`explain` renders a decision for ``POST /admin/routing/explain``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.endpoints.registry import EndpointRegistry
from gateway.endpoints.stats import Scrape, StatsBoard
from gateway.errors import GatewayError, InvalidRequestError
from gateway.selection.route import Route
from gateway.keys.limits import MICRO_USD, Reservation, estimate_prompt_tokens
from gateway.keys.model import KeyRecord
from gateway.keys.pricing import Pricing, TokenUsage, cost_usd
from gateway.protocol.openai import InferenceRequest
from gateway.selection.catalog import ModelCatalog, ModelEntry
from gateway.selection.classifier import ClassifierModel
from gateway.selection.limits import request_limits
from gateway.selection.load import ClusterProfile, ClusterView, LoadTracker
from gateway.observability.metrics import RouteMetrics
from gateway.selection.policy import Limits, PolicyParams, Selection, estimated_cost, fits, select_auto, select_pinned, select_tier
from gateway.selection.rewrite import thinking_off
from gateway.selection.signals import RequestSignals, output_cap, read_signals
from gateway.config import Settings

BUDGET_TTL_S = 1.0
_NO_LIMITS = Limits()
_MAX_BUDGET_ENTRIES = 10_000

SpentReader = Callable[[KeyRecord], Awaitable[float | None]]
"""The key's spend in its current budget period, USD; None when unknown."""


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class Routed:
    """A selected route, the request to send (thinking maybe switched off) and why."""

    model: str
    route: Route
    request: InferenceRequest
    selection: Selection
    views: Mapping[str, ClusterView] = field(default_factory=dict)
    signals: RequestSignals | None = None
    limits: Limits = Limits()
    threshold: float = 0.5

    @property
    def cluster(self) -> str:
        return self.route.clusters[0]


def profiles_of(settings: Settings, pricing: Pricing) -> dict[str, ClusterProfile]:
    """Each cluster's :class:`ClusterProfile` at the prices now in force."""
    return {
        name: ClusterProfile(
            name=name,
            tier=cluster.tier,
            price=pricing.get(name),
            max_context_tokens=cluster.max_context_tokens,
            thinking_switch=cluster.thinking_switch,
            slots_per_endpoint=cluster.selection.slots_per_endpoint,
            ttft_prior_s=cluster.selection.ttft_prior_ms / 1000.0,
            service_prior_s=cluster.selection.service_prior_s,
            expected_output_tokens=float(cluster.selection.expected_output_tokens),
            chars_per_token=cluster.selection.chars_per_token,
        )
        for name, cluster in settings.clusters.items()
    }


class RouteSelector:
    """One per app (see the module docstring). Event-loop only."""

    def __init__(
        self,
        *,
        settings: Callable[[], Settings],
        catalog: ModelCatalog,
        registry: EndpointRegistry,
        pricing: Pricing,
        metrics: RouteMetrics,
        spent: SpentReader | None = None,
        board: StatsBoard | None = None,
        stale_after_s: float = 5.0,
        clock: Callable[[], float] = time.perf_counter,
        model: ClassifierModel | None = None,
    ) -> None:
        self._settings = settings
        self._catalog = catalog
        self._registry = registry
        self._pricing = pricing
        self._metrics = metrics
        self._spent = spent
        self._board = board
        self._stale_after_s = stale_after_s
        self._clock = clock
        self.model = model or ClassifierModel.load()
        self.tracker = LoadTracker()
        self._budgets: dict[str, tuple[float, float | None]] = {}
        self._profiles: tuple[Settings, int, dict[str, ClusterProfile]] | None = None
        self._params: tuple[Any, PolicyParams] | None = None
        metrics.watch_clusters(self.tiered_views)

    def profiles(self) -> dict[str, ClusterProfile]:
        """:func:`profiles_of` for the settings and prices in force, rebuilt only when either changes
        (a reload swaps the settings object; a price change swaps the price table)."""
        settings, version = self._settings(), self._pricing.version
        cached = self._profiles
        if cached is None or cached[0] is not settings or cached[1] != version:
            cached = self._profiles = (settings, version, profiles_of(settings, self._pricing))
        return cached[2]

    # -- state ----------------------------------------------------------------------------------

    def views(self, names: Sequence[str] | None = None) -> dict[str, ClusterView]:
        """Live views of the named clusters (default: all), at current prices."""
        profiles = self.profiles()
        quantile = self._settings().route_selection.wait_quantile
        board, now, stale_after = self._board, self._clock(), self._stale_after_s  # one clock read for all

        def fresh(name: str) -> Scrape | None:
            return board.fresh(name, now, stale_after) if board is not None else None

        view, cluster = self.tracker.view, self._registry.cluster
        if names is None:
            return {name: view(p, cluster(name), fresh, quantile) for name, p in profiles.items()}
        views = {}
        for name in names:
            profile = profiles.get(name)
            if profile is not None:
                views[name] = view(profile, cluster(name), fresh, quantile)
        return views

    def tiered_views(self) -> list[ClusterView]:
        return [view for view in self.views().values() if view.tier is not None]

    def params(self) -> PolicyParams:
        """The policy's parameters from the settings in force (rebuilt when a reload swaps them)."""
        config = self._settings().route_selection
        cached = self._params
        if cached is not None and cached[0] is config:
            return cached[1]
        params = self._build_params(config)
        self._params = (config, params)
        return params

    def _build_params(self, config: Any) -> PolicyParams:
        threshold = config.classifier_threshold if config.classifier_threshold is not None else self.model.threshold
        return PolicyParams(
            threshold=threshold,
            light_max_output_tokens=config.light_max_output_tokens,
            saturated_load=config.saturated_load,
            idle_load=config.idle_load,
            max_error_rate=config.max_error_rate,
            budget_reserve_share=config.budget_reserve_share,
            context_margin=config.context_margin,
        )

    async def _budget_left(self, key: KeyRecord) -> tuple[float | None, float | None]:
        """``(budget_usd, left_usd)`` of the key; left is None when unknown or unlimited."""
        budget = key.limits.budget_usd
        if budget is None or self._spent is None:
            return budget, None
        now = self._clock()
        cached = self._budgets.get(key.id)
        if cached is None or now - cached[0] > BUDGET_TTL_S:
            try:
                spent = await self._spent(key)
            except GatewayError:
                spent = None
            if len(self._budgets) >= _MAX_BUDGET_ENTRIES:
                self._budgets.clear()
            cached = self._budgets[key.id] = (now, spent)
        return budget, (None if cached[1] is None else budget - cached[1])

    # -- selection ------------------------------------------------------------------------------

    async def select(self, request: InferenceRequest, key: KeyRecord, headers: Mapping[str, str]) -> Routed:
        """The route for ``request`` (see the module docstring).

        Raises:
            ModelNotFoundError: (404) unknown model name.
            InvalidRequestError: (400) a bad limit header, or ``context_length_exceeded``.
        """
        entry = self._catalog.resolve(request.model)
        settings = self._settings()
        max_ttft_s, max_cost = request_limits(headers, settings.route_selection.limits_for(key.name))
        params = self.params()
        views = self.views(None if entry.selects else entry.route.clusters)
        if entry.selects is None and not _context_limited(views):
            # a public model name whose clusters set no context limit keeps its route as it is:
            # nothing to estimate (the signals are read when explained)
            limits = _NO_LIMITS if max_ttft_s is None and max_cost is None else Limits(max_ttft_s, max_cost)
            selection = Selection(entry.route.clusters, entry.route.reason)
            return Routed(request.model, entry.route, request, selection, views, None, limits, params.threshold)
        config = settings.route_selection
        classifier = self.model if entry.selects == "auto" else None
        started = self._clock()
        signals = read_signals(
            request, classifier, chars_per_token=config.chars_per_token,
            tool_bias=config.tool_bias, strict_json_bias=config.strict_json_bias,
        )
        if classifier is not None:  # the histogram times the classifier; without one only estimates are read
            self._metrics.signal_seconds.observe(self._clock() - started)
        limits = Limits(max_ttft_s, max_cost)
        try:
            if entry.selects == "auto":
                budget, left = await self._budget_left(key)
                limits = Limits(max_ttft_s, max_cost, budget, left)
                selection = select_auto(signals, limits, list(views.values()), params)
            elif entry.selects is not None:
                selection = select_tier(entry.selects, signals, list(views.values()), params)
            else:
                selection = select_pinned(entry.route.clusters, entry.route.reason, signals, views, params)
        except InvalidRequestError:
            self._metrics.context_rejections.labels(request.model).inc()
            raise
        return self._routed(entry, request, selection, views, signals, limits, params.threshold)

    def _routed(
        self, entry: ModelEntry, request: InferenceRequest, selection: Selection, views: dict[str, ClusterView],
        signals: RequestSignals, limits: Limits, threshold: float,
    ) -> Routed:
        base = entry.route
        route = base
        if selection.clusters != base.clusters or selection.reason != base.reason:
            route = replace(base, clusters=selection.clusters, reason=selection.reason)
        if selection.thinking_off:
            request = thinking_off(request, views[selection.clusters[0]].profile.thinking_switch)
        return Routed(request.model, route, request, selection, views, signals, limits, threshold)

    # -- the exchange ---------------------------------------------------------------------------

    def attach(self, exchange: Any, routed: Routed) -> None:
        """Count the decision and put it on the exchange (its close-out calls :meth:`finished`)."""
        metrics = self._metrics
        labels = (routed.model, routed.route.clusters[0], routed.selection.reason)
        if metrics.tally is not None:  # added in at scrape (observability/tally.py)
            metrics.tally.count(metrics.selections, labels)
        else:
            metrics.selections.labels(*labels).inc()
        exchange.selection = routed

    def finished(self, exchange: Any, cost: float) -> None:
        """Feed the serving cluster's load model; count the request's ``cost`` (USD, priced once by the
        close-out, ``gateway/closeout.py``) by key (never raises)."""
        cluster, outcome = exchange.cluster, exchange.outcome
        if not cluster or outcome not in ("success", "upstream_error"):
            return
        profile = self.profiles().get(cluster)
        if profile is None:
            return
        routed: Routed | None = getattr(exchange, "selection", None)
        view = routed.views.get(cluster) if routed is not None else None
        tokens = exchange.tokens
        first = exchange.first_token_at
        started = exchange.started + getattr(exchange, "queued_s", 0.0)  # the engine's time, not the admission queue's
        self.tracker.observe(
            profile,
            ok=outcome == "success",
            wait_s=view.wait_s if view is not None else 0.0,
            ttft_s=(first - started) if first is not None else None,
            e2e_s=exchange.ended_at - started if exchange.ended_at else None,
            output_tokens=tokens.output if tokens is not None else None,
        )
        admission = exchange.admission
        if tokens is not None and outcome == "success" and admission is not None and cost > 0:
            self._metrics.key_cost.labels(admission.key.name, exchange.model, cluster).inc(cost)

    # -- admission --------------------------------------------------------------------------------

    def reservation(self, routed: Routed, route: Route, body_bytes: int) -> Reservation:
        """What the request holds against its key's TPM and budget until it settles.

        Tokens: the prompt estimate (``body_bytes / 4``, or the signals' estimate when route
        selection read them, whichever is larger) plus the output cap (``max_completion_tokens``,
        ``max_tokens``) or else the expected output of the route's clusters (learned from usage,
        ``expected_output_tokens`` at first); micro-USD: those tokens at the dearest cluster of
        ``route``. See ``gateway/keys/limits.py`` for the overshoot this bounds.
        """
        views = {name: routed.views[name] for name in route.clusters if name in routed.views}
        if len(views) < len(route.clusters):  # X-Failover-Route named clusters selection did not see
            views.update(self.views([name for name in route.clusters if name not in views]))
        prompt = estimate_prompt_tokens(body_bytes)
        if routed.signals is not None:
            prompt = max(prompt, routed.signals.prompt_tokens)
        cap = output_cap(routed.request.body)
        output = cap if cap is not None else max((math.ceil(v.output_tokens) for v in views.values()), default=0)
        tokens = TokenUsage(prompt, 0, output)
        cost = max((cost_usd(view.profile.price, tokens) for view in views.values()), default=0.0)
        return Reservation(prompt + output, math.ceil(cost * MICRO_USD))

    # -- explanation ----------------------------------------------------------------------------

    def explain(self, routed: Routed) -> dict[str, Any]:
        """The decision as JSON-ready data (admin explain endpoint)."""
        signals, limits, margin = routed.signals, routed.limits, self.params().context_margin
        if signals is None:  # not read when selecting (a pinned route with no context limit)
            config = self._settings().route_selection
            signals = read_signals(
                routed.request, None, chars_per_token=config.chars_per_token,
                tool_bias=config.tool_bias, strict_json_bias=config.strict_json_bias,
            )
        clusters = {}
        for name, view in routed.views.items():
            clusters[name] = {
                "tier": view.tier,
                "routable_endpoints": view.routable,
                "load": _finite(view.load, 3),
                "predicted_ttft_ms": _finite(view.predicted_ttft_s * 1000.0, 1),
                "queue_wait_ms": _finite(view.wait_s * 1000.0, 1),
                "error_rate": round(view.error_rate, 4),
                "max_context_tokens": view.profile.max_context_tokens,
                "fits": fits(view, signals, margin) if signals is not None else None,
                "estimated_cost_usd": round(estimated_cost(view, signals), 8) if signals is not None else None,
            }
        return {
            "model": routed.model,
            "route": routed.route.name,
            "clusters": list(routed.route.clusters),
            "reason": routed.selection.reason,
            "need": routed.selection.need,
            "need_source": routed.selection.need_source or None,
            "thinking_off": routed.selection.thinking_off,
            "signals": None if signals is None else {
                "score": round(signals.score, 4),
                "threshold": routed.threshold,
                "explicit": signals.explicit_source,
                "cues": sorted(signals.cues),
                "top_features": [[feature, weight] for feature, weight in self.model.top(signals.features)],
                "prompt_tokens_estimate": signals.prompt_tokens,
                "max_output_tokens": signals.max_output_tokens,
                "tools": signals.tools,
                "strict_json": signals.strict_json,
            },
            "limits": {
                "max_ttft_ms": None if limits.max_ttft_s is None else limits.max_ttft_s * 1000.0,
                "max_cost_usd": limits.max_cost_usd,
                "budget_usd": limits.budget_usd,
                "budget_left_usd": limits.budget_left_usd,
            },
            "cluster_state": clusters,
        }


def _context_limited(views: Mapping[str, ClusterView]) -> bool:
    """Whether a cluster of ``views`` sets ``max_context_tokens`` (a loop: no generator per request)."""
    for view in views.values():
        if view.profile.max_context_tokens:
            return True
    return False


def _finite(value: float, digits: int) -> float | None:
    return round(value, digits) if value != float("inf") else None


def spent_from(gate: Any) -> SpentReader:
    """A :data:`SpentReader` over a :class:`~gateway.keys.gate.KeyGate`'s quota store."""

    async def spent(key: KeyRecord) -> float | None:
        return await gate.store.spent(key.id, key.limits, gate.now()) / 1_000_000

    return spent
