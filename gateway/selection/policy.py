"""The route selection policy, pure: a request's signals and limits against each cluster's state.

**Does the request need reasoning?** (:func:`needs_reasoning`), first rule that applies:

1. the request says so itself (``reasoning_effort``, thinking switches; ``selection/signals.py``);
2. it allows at most ``light_max_output_tokens`` output tokens: light (no room to think);
3. the classifier's probability (with the tool and JSON biases) is at least ``threshold``.

**Context fit**: a cluster with ``max_context_tokens`` holds the request when
``ceil(prompt_tokens * (1 + context_margin)) + max_output_tokens <= max_context_tokens`` (the
prompt estimated at the cluster's own characters per token when it sets one; the output cap
counts as 0 when the request has none: engines then generate up to the context limit). Only clusters that hold the request are candidates; when none does, the request gets a
400 ``context_length_exceeded`` before any upstream call.

**Cost estimate** on a cluster: ``(prompt_tokens * input + output * output_price) / 1e6`` USD,
``output`` being the cluster's recent output tokens per request, capped by the request's own cap.

**Within a tier**, candidates rank by: usable first (a routable endpoint and an error rate at most
``max_error_rate``), then lowest predicted TTFT, then lowest estimated cost.

**``auto``** (:func:`select_auto`) decides the primary cluster, with the reason that names it:

==================== ===========================================================================
reason               when
==================== ===========================================================================
``needs_reasoning``  needs reasoning; the best reasoning cluster is within every limit
``downgrade_budget`` needs reasoning, but the key's remaining budget is under
                     ``budget_reserve_share`` of its budget or under the estimated cost on
                     reasoning: fast
``downgrade_cost``   needs reasoning, but its estimated cost is over ``X-Max-Cost-USD`` and fast's
                     is lower: fast
``downgrade_ttft``   needs reasoning, but its predicted TTFT is over ``X-Max-TTFT-Ms`` and fast's
                     is lower: fast
``light``            light: the best fast cluster
``upgrade_saturated`` light, but fast is saturated (load >= ``saturated_load``) while reasoning is
                     idle (load <= ``idle_load``) and within every limit: reasoning
``upgrade_ttft``     light, but fast's predicted TTFT is over the limit and reasoning's is not
                     (and reasoning is within the cost and budget limits): reasoning
``unavailable``      the wanted tier has no usable cluster (or none configured): the other tier
``context_fit``      no cluster of the wanted tier holds the request: the other tier
==================== ===========================================================================

Checks run in that order (money before latency). A downgrade of a request that wanted reasoning
onto a cluster with a ``thinking_switch`` sets ``thinking_off``. The route continues with the
other clusters of the primary's tier, then those of the other tier (failover chain), holding
the request only.

**Tier aliases** ``reasoning`` and ``fast`` (:func:`select_tier`): the best cluster of the tier,
then the rest of the tier; reason ``tier`` (``context_fit`` when the best one could not hold it).
**Public model names** (:func:`select_pinned`) keep their route, less the clusters that cannot
hold the request (reason ``context_fit`` when the primary was dropped). Limits and budgets steer
only ``auto``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway.errors import InvalidRequestError
from gateway.selection.load import ClusterView
from gateway.selection.signals import REASONING, RequestSignals

FAST = "fast"


@dataclass(frozen=True, slots=True)
class PolicyParams:
    """The policy's thresholds (``[route_selection]``; see ``config/selection.py``)."""

    threshold: float = 0.5
    light_max_output_tokens: int = 64
    saturated_load: float = 1.0
    idle_load: float = 0.5
    max_error_rate: float = 0.5
    budget_reserve_share: float = 0.1
    context_margin: float = 0.15


@dataclass(frozen=True, slots=True)
class Limits:
    """One request's limits: TTFT (s) and cost (USD) ceilings, the key's budget and what is left."""

    max_ttft_s: float | None = None
    max_cost_usd: float | None = None
    budget_usd: float | None = None
    budget_left_usd: float | None = None


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class Selection:
    """The policy's answer: clusters in the order to try, why, and what the request needed."""

    clusters: tuple[str, ...]
    reason: str
    need: str | None = None
    need_source: str = ""
    thinking_off: bool = False


def needs_reasoning(signals: RequestSignals, params: PolicyParams) -> tuple[bool, str]:
    """Whether the request needs reasoning, and the rule that decided it."""
    if signals.explicit is not None:
        return signals.explicit == REASONING, signals.explicit_source or "explicit"
    cap = signals.max_output_tokens
    if cap is not None and cap <= params.light_max_output_tokens:
        return False, f"max_output_tokens={cap}<={params.light_max_output_tokens}"
    verdict = signals.score >= params.threshold
    return verdict, f"score={signals.score:.3f}{'>=' if verdict else '<'}{params.threshold:.3f}"


def needed_tokens(signals: RequestSignals, margin: float, view: ClusterView | None = None) -> int:
    """Prompt tokens (on ``view``'s model) with the safety margin, plus the requested output."""
    prompt = signals.prompt_tokens_at(view.profile.chars_per_token if view is not None else None)
    return math.ceil(round(prompt * (1.0 + margin), 6)) + (signals.max_output_tokens or 0)


def fits(view: ClusterView, signals: RequestSignals, margin: float) -> bool:
    cap = view.profile.max_context_tokens
    return cap is None or needed_tokens(signals, margin, view) <= cap


def estimated_cost(view: ClusterView, signals: RequestSignals) -> float:
    """The request's estimated cost on the cluster, USD."""
    output = view.output_tokens
    if signals.max_output_tokens is not None:
        output = min(output, signals.max_output_tokens)
    price = view.profile.price
    prompt = signals.prompt_tokens_at(view.profile.chars_per_token)
    return (prompt * price.input_per_mtok + output * price.output_per_mtok) / 1e6


def usable(view: ClusterView, params: PolicyParams) -> bool:
    return view.routable > 0 and view.error_rate <= params.max_error_rate


def rank(views: Sequence[ClusterView], signals: RequestSignals, params: PolicyParams) -> list[ClusterView]:
    """Usable first, then lowest predicted TTFT, then lowest estimated cost."""
    return sorted(views, key=lambda v: (not usable(v, params), v.predicted_ttft_s, estimated_cost(v, signals)))


def context_error(signals: RequestSignals, views: Sequence[ClusterView], margin: float) -> InvalidRequestError:
    """The 400 for a request no candidate cluster can hold."""
    largest = max(views, key=lambda v: v.profile.max_context_tokens or 0, default=None)
    output = signals.max_output_tokens or 0
    size = largest.profile.max_context_tokens or 0 if largest is not None else 0
    prompt = signals.prompt_tokens_at(largest.profile.chars_per_token if largest is not None else None)
    field = signals.prompt_param
    return InvalidRequestError(
        f"This model's maximum context length is {size} tokens. However, you requested about "
        f"{needed_tokens(signals, margin, largest)} tokens (about {prompt} in the {field} with a "
        f"{margin:.0%} margin, {output} in the completion). Please reduce the length of the {field} or completion.",
        param=field,
        code="context_length_exceeded",
    )


class _Auto:
    """One ``auto`` decision (keeps the inputs together; see :func:`select_auto`)."""

    def __init__(self, signals: RequestSignals, limits: Limits, params: PolicyParams) -> None:
        self.signals, self.limits, self.params = signals, limits, params

    def cost(self, view: ClusterView) -> float:
        return estimated_cost(view, self.signals)

    def budget_low(self, view: ClusterView) -> bool:
        left, total = self.limits.budget_left_usd, self.limits.budget_usd
        if left is None:
            return False
        reserve = self.params.budget_reserve_share * total if total is not None else 0.0
        return left <= reserve or left < self.cost(view)

    def within(self, view: ClusterView) -> bool:
        limits = self.limits
        return (
            not self.budget_low(view)
            and (limits.max_cost_usd is None or self.cost(view) <= limits.max_cost_usd)
            and (limits.max_ttft_s is None or view.predicted_ttft_s <= limits.max_ttft_s)
        )

    def for_reasoning(self, r: ClusterView | None, f: ClusterView | None, missing: str) -> tuple[ClusterView | None, str]:
        if r is None:
            return f, missing
        if f is not None:
            if self.budget_low(r):
                return f, "downgrade_budget"
            cap = self.limits.max_cost_usd
            if cap is not None and self.cost(r) > cap and self.cost(f) < self.cost(r):
                return f, "downgrade_cost"
            ttft = self.limits.max_ttft_s
            if ttft is not None and r.predicted_ttft_s > ttft and f.predicted_ttft_s < r.predicted_ttft_s:
                return f, "downgrade_ttft"
        return r, "needs_reasoning"

    def for_light(self, r: ClusterView | None, f: ClusterView | None, missing: str) -> tuple[ClusterView | None, str]:
        if f is None:
            return r, missing
        if r is not None and self.within(r):
            if f.load >= self.params.saturated_load and r.load <= self.params.idle_load:
                return r, "upgrade_saturated"
            ttft = self.limits.max_ttft_s
            if ttft is not None and f.predicted_ttft_s > ttft:
                return r, "upgrade_ttft"
        return f, "light"


def select_auto(signals: RequestSignals, limits: Limits, views: Sequence[ClusterView], params: PolicyParams) -> Selection:
    """The ``auto`` decision (see the module docstring).

    Raises:
        InvalidRequestError: (400 ``context_length_exceeded``) no tiered cluster holds the request.
    """
    need, source = needs_reasoning(signals, params)
    tiered = [v for v in views if v.tier in (REASONING, FAST)]
    fitting = [v for v in tiered if fits(v, signals, params.context_margin)]
    if not fitting:
        raise context_error(signals, tiered, params.context_margin)
    ranked = {tier: rank([v for v in fitting if v.tier == tier], signals, params) for tier in (REASONING, FAST)}
    best = {tier: next((v for v in members if usable(v, params)), None) for tier, members in ranked.items()}
    wanted = REASONING if need else FAST
    configured = any(v.tier == wanted for v in tiered)
    missing = "context_fit" if configured and not ranked[wanted] else "unavailable"
    decide = _Auto(signals, limits, params)
    chooser = decide.for_reasoning if need else decide.for_light
    primary, reason = chooser(best[REASONING], best[FAST], missing)
    if primary is None:  # nothing usable anywhere: try the wanted tier anyway (breakers decide)
        primary, reason = (ranked[wanted] or ranked[FAST if need else REASONING])[0], "unavailable"
    other = FAST if primary.tier == REASONING else REASONING
    order = [primary] + [v for v in ranked[primary.tier or wanted] if v is not primary] + ranked[other]
    thinking_off = need and primary.tier == FAST and primary.profile.thinking_switch != "none"
    return Selection(tuple(v.name for v in order), reason, REASONING if need else "light", source, thinking_off)


def select_tier(tier: str, signals: RequestSignals, views: Sequence[ClusterView], params: PolicyParams) -> Selection:
    """The ``reasoning`` or ``fast`` alias: the tier's clusters, best first.

    Raises:
        InvalidRequestError: (400 ``context_length_exceeded``) no cluster of the tier holds it.
    """
    members = rank([v for v in views if v.tier == tier], signals, params)
    fitting = [v for v in members if fits(v, signals, params.context_margin)]
    if not fitting:
        raise context_error(signals, members, params.context_margin)
    reason = "tier" if fitting[0] is members[0] else "context_fit"
    return Selection(tuple(v.name for v in fitting), reason)


def select_pinned(
    clusters: Sequence[str], reason: str, signals: RequestSignals, views: Mapping[str, ClusterView], params: PolicyParams
) -> Selection:
    """A public model's route, less the clusters that cannot hold the request.

    Raises:
        InvalidRequestError: (400 ``context_length_exceeded``) none of them holds it.
    """
    kept = [c for c in clusters if c not in views or fits(views[c], signals, params.context_margin)]
    if not kept:
        raise context_error(signals, [views[c] for c in clusters if c in views], params.context_margin)
    return Selection(tuple(kept), reason if kept[0] == clusters[0] else "context_fit")
