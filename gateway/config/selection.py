"""Typed configuration of route selection: ``[route_selection]`` and each cluster's tier fields.

Imported by ``gateway/config/clusters.py`` and ``gateway/config/settings.py``; every key is documented in
``config.example.toml``.

Per cluster (``[clusters.NAME]``): ``tier`` (``reasoning`` or ``fast``; clusters with a tier
answer the model aliases ``auto``, ``reasoning`` and ``fast``), ``max_context_tokens``,
``thinking_switch`` (how to switch thinking off on that cluster when a request that wanted
reasoning is downgraded onto it) and ``[clusters.NAME.selection]`` (the load model's capacity
and priors, :class:`ClusterSelectionSettings`).

``[route_selection]`` (:class:`SelectionSettings`): the policy's thresholds and the per-key
default limits (``[route_selection.keys.KEY_NAME]``: ``max_ttft_ms``, ``max_cost_usd``), which
the request headers ``X-Max-TTFT-Ms`` and ``X-Max-Cost-USD`` override.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gateway.config.section import Section

TIERS = ("reasoning", "fast")
ALIASES = ("auto", *TIERS)

Tier = Literal["reasoning", "fast"]
ThinkingSwitch = Literal["none", "enable-thinking", "effort-none", "effort-low"]


class ClusterSelectionSettings(Section):
    """A cluster's capacity and the priors of its load model (``selection/load.py``)."""

    slots_per_endpoint: int = Field(
        16, ge=1, description="Requests one endpoint of weight 1 serves at once before new ones queue."
    )
    ttft_prior_ms: float = Field(500.0, gt=0, description="TTFT without queueing assumed until measured, ms.")
    service_prior_s: float = Field(20.0, gt=0, description="Duration of one request assumed until measured, s.")
    expected_output_tokens: int = Field(
        500, ge=1, description="Output tokens per request assumed until measured (cost estimates)."
    )
    chars_per_token: float | None = Field(
        None, gt=0, description="Prompt characters per token of this model; None: [route_selection]'s."
    )


class KeyRouteLimits(Section):
    """A key's default per-request limits; the request headers override them."""

    max_ttft_ms: float | None = Field(None, gt=0, description="Largest predicted TTFT accepted, ms.")
    max_cost_usd: float | None = Field(None, gt=0, description="Largest estimated cost of one request, USD.")


class SelectionSettings(Section):
    """The route selection policy (``gateway/selection/policy.py``)."""

    classifier_threshold: float | None = Field(
        None, gt=0, lt=1, description="Needs-reasoning probability threshold; None: the trained model's own."
    )
    light_max_output_tokens: int = Field(
        64, ge=0, description="A request allowing at most this many output tokens counts as light."
    )
    tool_bias: float = Field(
        0.0, description="Added to the classifier's logit when the request offers tools (the model has its own weight)."
    )
    strict_json_bias: float = Field(
        0.0, description="Added to the classifier's logit when the request asks for JSON output (the model has its own weight)."
    )
    saturated_load: float = Field(
        1.0, gt=0, description="A cluster is saturated when a new request would find this share of its slots busy."
    )
    idle_load: float = Field(0.5, gt=0, description="A cluster is idle at or below this share of busy slots.")
    wait_quantile: float = Field(
        0.99, gt=0, lt=1, description="Quantile of the queueing wait that predicted TTFT uses (selection/load.py)."
    )
    max_error_rate: float = Field(
        0.5, gt=0, le=1, description="A cluster whose recent error rate is above this is avoided."
    )
    budget_reserve_share: float = Field(
        0.1, ge=0, lt=1, description="Downgrade when a key's remaining budget falls under this share of it."
    )
    chars_per_token: float = Field(4.0, gt=0, description="Characters per token of the prompt estimate.")
    context_margin: float = Field(
        0.15, ge=0, le=1, description="Safety margin on the prompt estimate when checking context fit."
    )
    defaults: KeyRouteLimits = Field(default_factory=KeyRouteLimits, description="Limits of keys not listed.")
    keys: dict[str, KeyRouteLimits] = Field(default_factory=dict, description="Limits by key name.")

    def limits_for(self, key_name: str) -> KeyRouteLimits:
        """The default limits of the key called ``key_name``."""
        return self.keys.get(key_name, self.defaults)


def check_alias_names(tiers: dict[str, str | None], public_names: list[str]) -> None:
    """The aliases ``auto``, ``reasoning`` and ``fast`` exist once a cluster has a tier; then no
    public model name or model alias may take them (a cluster of that name is fine: the tier
    alias answers its name, and ``X-Failover-Route`` still reaches the cluster).

    Raises:
        ValueError: naming the clashing name.
    """
    if not any(tiers.values()):
        return
    for name in public_names:
        if name in ALIASES:
            raise ValueError(
                f"models: {name!r} is a route selection alias once a cluster has a `tier`; choose another name"
            )
