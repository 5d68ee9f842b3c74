"""The route selection policy, table by table: need, fit, downgrades, upgrades, chains, aliases."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from gateway.errors import InvalidRequestError
from gateway.keys.pricing import Price
from gateway.selection.load import ClusterProfile, ClusterView
from gateway.selection.policy import (
    Limits,
    PolicyParams,
    estimated_cost,
    fits,
    needed_tokens,
    needs_reasoning,
    select_auto,
    select_pinned,
    select_tier,
)
from gateway.selection.signals import RequestSignals

PARAMS = PolicyParams(threshold=0.5, light_max_output_tokens=64, saturated_load=1.0, idle_load=0.5,
                      max_error_rate=0.5, budget_reserve_share=0.1, context_margin=0.1)
R_PRICE = Price(0.55, 0.14, 2.19)
F_PRICE = Price(0.10, 0.025, 0.30)


def sig(**fields: Any) -> RequestSignals:
    base = RequestSignals(explicit=None, explicit_source=None, max_output_tokens=None, prompt_tokens=100,
                          tools=False, strict_json=False, cues=frozenset(), score=0.9)
    return replace(base, **fields)


def cluster(name: str, tier: str | None, **state: Any) -> ClusterView:
    profile = ClusterProfile(
        name=name, tier=tier, price=R_PRICE if tier == "reasoning" else F_PRICE,
        max_context_tokens=state.pop("ctx", None), thinking_switch=state.pop("switch", "none"),
    )
    defaults: dict[str, Any] = {"routable": 1, "load": 0.1, "wait_s": 0.0, "base_ttft_s": 0.5,
                                "error_rate": 0.0, "output_tokens": 1000.0 if tier == "reasoning" else 300.0}
    return ClusterView(profile, **{**defaults, **state})


def two(r: dict[str, Any] | None = None, f: dict[str, Any] | None = None) -> list[ClusterView]:
    return [cluster("r1", "reasoning", **(r or {})), cluster("f1", "fast", **(f or {}))]


# -- does it need reasoning? ------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("fields", "need", "source"),
    [
        ({"score": 0.9}, True, "score=0.900>=0.500"),
        ({"score": 0.1}, False, "score=0.100<0.500"),
        ({"score": 0.5}, True, "score=0.500>=0.500"),
        ({"score": 0.1, "explicit": "reasoning", "explicit_source": "reasoning_effort=high"}, True, "reasoning_effort=high"),
        ({"score": 0.9, "explicit": "light", "explicit_source": "reasoning_effort=none"}, False, "reasoning_effort=none"),
        ({"score": 0.9, "max_output_tokens": 64}, False, "max_output_tokens=64<=64"),
        ({"score": 0.9, "max_output_tokens": 65}, True, "score=0.900>=0.500"),
        ({"score": 0.1, "max_output_tokens": 10, "explicit": "reasoning", "explicit_source": "x"}, True, "x"),
    ],
)
def test_needs_reasoning(fields: dict[str, Any], need: bool, source: str) -> None:
    assert needs_reasoning(sig(**fields), PARAMS) == (need, source)


# -- context fit and cost ---------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("prompt", "output", "ctx", "needed", "fit"),
    [
        (100, None, None, 110, True),
        (100, None, 110, 110, True),
        (100, None, 109, 110, False),
        (100, 50, 160, 160, True),
        (100, 50, 159, 160, False),
        (1, None, 2, 2, True),
    ],
)
def test_context_fit(prompt: int, output: int | None, ctx: int | None, needed: int, fit: bool) -> None:
    signals = sig(prompt_tokens=prompt, max_output_tokens=output)
    assert needed_tokens(signals, 0.1) == needed
    assert fits(cluster("c", "fast", ctx=ctx), signals, 0.1) is fit


def test_a_cluster_with_a_denser_tokenizer_holds_less() -> None:
    from gateway.selection.prompt import PromptView

    signals = sig(prompt_tokens=100, prompt=PromptView("", 400, 0))  # 400 characters: 100 tokens at 4
    dense = ClusterView(ClusterProfile("d", "fast", F_PRICE, max_context_tokens=150, chars_per_token=2.0))
    assert fits(cluster("c", "fast", ctx=150), signals, 0.1) and not fits(dense, signals, 0.1)
    assert estimated_cost(dense, signals) == pytest.approx((200 * 0.10 + 500 * 0.30) / 1e6)


@pytest.mark.parametrize(
    ("tier", "output_cap", "expected"),
    [
        ("reasoning", None, (1000 * 0.55 + 1000 * 2.19) / 1e6),
        ("reasoning", 100, (1000 * 0.55 + 100 * 2.19) / 1e6),
        ("fast", None, (1000 * 0.10 + 300 * 0.30) / 1e6),
        ("fast", 5000, (1000 * 0.10 + 300 * 0.30) / 1e6),
    ],
)
def test_estimated_cost(tier: str, output_cap: int | None, expected: float) -> None:
    cost = estimated_cost(cluster("c", tier), sig(prompt_tokens=1000, max_output_tokens=output_cap))
    assert cost == pytest.approx(expected)


# -- auto: one row per rule -------------------------------------------------------------------------

AUTO_CASES = [
    # (id, signals, limits, reasoning state, fast state, primary, reason, thinking_off)
    ("needs reasoning", {}, Limits(), {}, {}, "r1", "needs_reasoning", False),
    ("light", {"score": 0.1}, Limits(), {}, {}, "f1", "light", False),
    ("explicit effort none", {"explicit": "light", "explicit_source": "reasoning_effort=none"}, Limits(), {}, {},
     "f1", "light", False),
    ("ttft over limit", {}, Limits(max_ttft_s=1.0), {"wait_s": 3.0}, {}, "f1", "downgrade_ttft", False),
    ("ttft over limit, fast thinks", {}, Limits(max_ttft_s=1.0), {"wait_s": 3.0}, {"switch": "enable-thinking"},
     "f1", "downgrade_ttft", True),
    ("ttft over limit but fast slower", {}, Limits(max_ttft_s=1.0), {"wait_s": 3.0}, {"wait_s": 5.0},
     "r1", "needs_reasoning", False),
    ("ttft within limit", {}, Limits(max_ttft_s=1.0), {"wait_s": 0.4}, {}, "r1", "needs_reasoning", False),
    ("budget spent below reserve", {}, Limits(budget_usd=10.0, budget_left_usd=0.9), {}, {},
     "f1", "downgrade_budget", False),
    ("budget left under reasoning cost", {"prompt_tokens": 100_000}, Limits(budget_usd=100.0, budget_left_usd=0.05),
     {}, {}, "f1", "downgrade_budget", False),
    ("budget fine", {}, Limits(budget_usd=10.0, budget_left_usd=5.0), {}, {}, "r1", "needs_reasoning", False),
    ("cost over request limit", {}, Limits(max_cost_usd=0.0005), {}, {}, "f1", "downgrade_cost", False),
    ("cost within request limit", {}, Limits(max_cost_usd=0.01), {}, {}, "r1", "needs_reasoning", False),
    ("budget checked before ttft", {}, Limits(max_ttft_s=1.0, budget_usd=10.0, budget_left_usd=0.5),
     {"wait_s": 3.0}, {}, "f1", "downgrade_budget", False),
    ("fast saturated, reasoning idle", {"score": 0.1}, Limits(), {"load": 0.2}, {"load": 1.5},
     "r1", "upgrade_saturated", False),
    ("fast saturated, reasoning busy", {"score": 0.1}, Limits(), {"load": 0.8}, {"load": 1.5}, "f1", "light", False),
    ("fast saturated, reasoning idle but over ttft", {"score": 0.1}, Limits(max_ttft_s=0.4), {"load": 0.2},
     {"load": 1.5}, "f1", "light", False),
    ("fast saturated, reasoning idle but budget low", {"score": 0.1}, Limits(budget_usd=1.0, budget_left_usd=0.01),
     {"load": 0.2}, {"load": 1.5}, "f1", "light", False),
    ("fast over ttft, reasoning within", {"score": 0.1}, Limits(max_ttft_s=1.0), {}, {"wait_s": 2.0},
     "r1", "upgrade_ttft", False),
    ("reasoning unroutable", {}, Limits(), {"routable": 0, "load": float("inf"), "wait_s": float("inf")}, {},
     "f1", "unavailable", False),
    ("reasoning erroring", {}, Limits(), {"error_rate": 0.8}, {}, "f1", "unavailable", False),
    ("fast unroutable", {"score": 0.1}, Limits(), {}, {"routable": 0}, "r1", "unavailable", False),
    ("reasoning too small", {"prompt_tokens": 5000}, Limits(), {"ctx": 4096}, {"ctx": 32768},
     "f1", "context_fit", False),
    ("fast too small", {"prompt_tokens": 5000, "score": 0.1}, Limits(), {"ctx": 65536}, {"ctx": 4096},
     "r1", "context_fit", False),
    ("both unusable", {}, Limits(), {"routable": 0}, {"routable": 0}, "r1", "unavailable", False),
]


@pytest.mark.parametrize(("signals", "limits", "r", "f", "primary", "reason", "thinking_off"),
                         [case[1:] for case in AUTO_CASES], ids=[case[0] for case in AUTO_CASES])
def test_auto(signals: dict[str, Any], limits: Limits, r: dict[str, Any], f: dict[str, Any],
              primary: str, reason: str, thinking_off: bool) -> None:
    selection = select_auto(sig(**signals), limits, two(r, f), PARAMS)
    assert (selection.clusters[0], selection.reason, selection.thinking_off) == (primary, reason, thinking_off)
    assert set(selection.clusters) <= {"r1", "f1"}


def test_auto_chain_is_own_tier_best_first_then_the_other_tier() -> None:
    views = [
        cluster("r-busy", "reasoning", wait_s=2.0), cluster("r-idle", "reasoning"),
        cluster("f-a", "fast", base_ttft_s=0.3), cluster("f-b", "fast", base_ttft_s=0.2), cluster("plain", None),
    ]
    assert select_auto(sig(), Limits(), views, PARAMS).clusters == ("r-idle", "r-busy", "f-b", "f-a")
    assert select_auto(sig(score=0.0), Limits(), views, PARAMS).clusters == ("f-b", "f-a", "r-idle", "r-busy")


def test_auto_chain_leaves_out_clusters_that_cannot_hold_the_prompt() -> None:
    views = [cluster("r1", "reasoning", ctx=1000), cluster("f1", "fast", ctx=100_000)]
    selection = select_auto(sig(prompt_tokens=2000), Limits(), views, PARAMS)
    assert selection.clusters == ("f1",)


def test_auto_with_one_tier_only() -> None:
    selection = select_auto(sig(), Limits(), [cluster("f1", "fast")], PARAMS)
    assert (selection.clusters, selection.reason) == (("f1",), "unavailable")


def test_auto_records_the_need_and_its_source() -> None:
    selection = select_auto(sig(score=0.2), Limits(max_ttft_s=1.0), two(), PARAMS)
    assert (selection.need, selection.need_source) == ("light", "score=0.200<0.500")


def test_no_cluster_holds_the_prompt_is_a_400_context_length_exceeded() -> None:
    views = [cluster("r1", "reasoning", ctx=1000), cluster("f1", "fast", ctx=2000)]
    with pytest.raises(InvalidRequestError) as caught:
        select_auto(sig(prompt_tokens=1900, max_output_tokens=200), Limits(), views, PARAMS)
    error = caught.value
    assert (error.status, error.code, error.param) == (400, "context_length_exceeded", "messages")
    assert "maximum context length is 2000 tokens" in error.message
    assert "about 2290 tokens" in error.message


def test_a_text_completion_too_long_blames_its_prompt() -> None:
    views = [cluster("f1", "fast", ctx=1000)]
    with pytest.raises(InvalidRequestError) as caught:
        select_auto(sig(prompt_tokens=1900, prompt_param="prompt"), Limits(), views, PARAMS)
    error = caught.value
    assert (error.status, error.type, error.code, error.param) == (400, "invalid_request_error", "context_length_exceeded", "prompt")
    assert "in the prompt" in error.message and "messages" not in error.message


# -- tier aliases and pinned models -----------------------------------------------------------------

TIER_CASES = [
    ("best of tier", "reasoning", {}, [("a", {"wait_s": 1.0}), ("b", {})], ("b", "a"), "tier"),
    ("unusable last", "reasoning", {}, [("a", {"routable": 0}), ("b", {"wait_s": 9.0})], ("b", "a"), "tier"),
    ("best cannot hold it", "reasoning", {"prompt_tokens": 3000}, [("a", {"ctx": 2000}), ("b", {"wait_s": 1.0})],
     ("b",), "context_fit"),
    ("other one cannot hold it", "reasoning", {"prompt_tokens": 3000}, [("a", {}), ("b", {"ctx": 2000, "wait_s": 1.0})],
     ("a",), "tier"),
]


@pytest.mark.parametrize(("tier", "signals", "members", "order", "reason"), [c[1:] for c in TIER_CASES],
                         ids=[c[0] for c in TIER_CASES])
def test_tier_alias(tier: str, signals: dict[str, Any], members: list[tuple[str, dict[str, Any]]],
                    order: tuple[str, ...], reason: str) -> None:
    views = [cluster(name, tier, **state) for name, state in members] + [cluster("f9", "fast")]
    selection = select_tier(tier, sig(**signals), views, PARAMS)
    assert (selection.clusters, selection.reason) == (order, reason)


def test_tier_alias_never_crosses_tiers() -> None:
    views = [cluster("r1", "reasoning", ctx=100), cluster("f1", "fast")]
    with pytest.raises(InvalidRequestError):
        select_tier("reasoning", sig(prompt_tokens=500), views, PARAMS)


PINNED_CASES = [
    ("unknown sizes keep the route", {}, {}, ("r1", "f1"), "model"),
    ("primary too small", {"ctx": 100}, {}, ("f1",), "context_fit"),
    ("failover too small", {}, {"ctx": 100}, ("r1",), "model"),
]


@pytest.mark.parametrize(("r", "f", "order", "reason"), [c[1:] for c in PINNED_CASES], ids=[c[0] for c in PINNED_CASES])
def test_pinned(r: dict[str, Any], f: dict[str, Any], order: tuple[str, ...], reason: str) -> None:
    views = {v.name: v for v in two(r, f)}
    selection = select_pinned(("r1", "f1"), "model", sig(prompt_tokens=500), views, PARAMS)
    assert (selection.clusters, selection.reason) == (order, reason)


def test_pinned_model_that_nothing_holds_is_a_400() -> None:
    views = {v.name: v for v in two({"ctx": 100}, {"ctx": 100})}
    with pytest.raises(InvalidRequestError) as caught:
        select_pinned(("r1", "f1"), "model", sig(prompt_tokens=500), views, PARAMS)
    assert caught.value.code == "context_length_exceeded"
