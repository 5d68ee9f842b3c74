"""Route selection end to end: the official openai SDK -> kvgate -> fake reasoning and fast clusters.

Two tiered clusters on real loopback HTTP: ``deep`` (reasoning, TTFT prior 2 s, 8k context) and
``quick`` (fast, 4k context, Qwen3-style thinking switch). ``auto`` picks by prompt, headers and
key defaults; every decision shows in ``x-kvgate-route`` and in the metrics.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway, error_shape_ok
from tests.support.threads import wait_until

KEY_A = "sk-route-team-a-0123456789"
KEY_B = "sk-route-team-b-0123456789"
ADMIN = "adm-route-0123456789"
PROOF = "Prove that there are infinitely many primes, step by step."
LIGHT = "Translate 'good morning' into Indonesian."


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, FakeUpstream]]:
    started = {"deep": FakeUpstream("deep").start(), "quick": FakeUpstream("quick").start()}
    yield started
    for fake in started.values():
        fake.stop()


@pytest.fixture(scope="module")
def gateway(fakes: dict[str, FakeUpstream]) -> Iterator[RunningGateway]:
    config: dict[str, Any] = {
        "auth": {"keys": [{"name": "team-a", "key": KEY_A}, {"name": "team-b", "key": KEY_B}]},
        "admin": {"api_key": ADMIN},
        "clusters": {
            "deep": {
                "tier": "reasoning", "max_context_tokens": 8000,
                "price": {"input_per_mtok": 0.55, "cached_input_per_mtok": 0.14, "output_per_mtok": 2.19},
                "selection": {"ttft_prior_ms": 2000},
                "endpoints": [{"name": "deep-0", "url": fakes["deep"].base_url, "model": "r1-served"}],
            },
            "quick": {
                "tier": "fast", "max_context_tokens": 4000, "thinking_switch": "enable-thinking",
                "price": {"input_per_mtok": 0.1, "output_per_mtok": 0.3},
                "selection": {"ttft_prior_ms": 100},
                "endpoints": [{"name": "quick-0", "url": fakes["quick"].base_url, "model": "q-served"}],
            },
        },
        "models": {"deep-public": {"cluster": "deep", "failover": ["quick"]}},
        "route_selection": {"keys": {"team-b": {"max_ttft_ms": 1000}}},
    }
    running = RunningGateway(config, health_checks=False).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def client(gateway: RunningGateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gateway.base_url, api_key=KEY_A, max_retries=0) as sdk:
        yield sdk


def ask(client: openai.OpenAI, content: str, model: str = "auto", headers: dict[str, str] | None = None,
        **extra: Any) -> Any:
    return client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": content}], extra_headers=headers or {}, **extra
    )


# (id, content, model, headers, extra body, route header, cluster, served model)
CASES = [
    ("reasoning", PROOF, "auto", {}, {}, "auto; reason=needs_reasoning", "deep", "r1-served"),
    ("light", LIGHT, "auto", {}, {}, "auto; reason=light", "quick", "q-served"),
    ("explicit effort", LIGHT, "auto", {}, {"reasoning_effort": "high"}, "auto; reason=needs_reasoning", "deep", "r1-served"),
    ("explicit off", PROOF, "auto", {}, {"reasoning_effort": "none"}, "auto; reason=light", "quick", "q-served"),
    ("ttft limit", PROOF, "auto", {"X-Max-TTFT-Ms": "1000"}, {}, "auto; reason=downgrade_ttft", "quick", "q-served"),
    ("cost limit", PROOF, "auto", {"X-Max-Cost-USD": "0.0001"}, {}, "auto; reason=downgrade_cost", "quick", "q-served"),
    ("tier alias", LIGHT, "reasoning", {}, {}, "reasoning; reason=tier", "deep", "r1-served"),
    ("pinned", LIGHT, "deep-public", {"X-Max-TTFT-Ms": "1"}, {}, "deep-public; reason=model", "deep", "r1-served"),
    ("failover header wins", PROOF, "auto", {"X-Failover-Route": "true"}, {}, "auto; reason=header:true", "quick", "q-served"),
    ("failover header forces", LIGHT, "auto", {"X-Failover-Route": "deep"}, {}, "deep; reason=header:route", "deep", "r1-served"),
]


@pytest.mark.parametrize(("content", "model", "headers", "extra", "route", "cluster", "served"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_auto_routes_by_request_and_says_why(
    client: openai.OpenAI, fakes: dict[str, FakeUpstream], content: str, model: str, headers: dict[str, str],
    extra: dict[str, Any], route: str, cluster: str, served: str,
) -> None:
    raw = ask(client, content, model, headers, extra_body=extra)
    assert raw.headers["x-kvgate-route"] == route
    assert raw.headers["x-kvgate-cluster"] == cluster
    assert raw.parse().choices[0].message.content == f"echo from {cluster}"
    seen = fakes[cluster].last
    assert seen["body"]["model"] == served
    assert not {name for name in seen["headers"] if name.startswith(("x-max-", "x-failover"))}


def test_a_downgrade_switches_thinking_off_on_the_fast_cluster(client: openai.OpenAI, fakes: dict[str, FakeUpstream]) -> None:
    ask(client, PROOF, headers={"X-Max-TTFT-Ms": "1000"}, extra_body={"chat_template_kwargs": {"foo": 1}})
    assert fakes["quick"].last["body"]["chat_template_kwargs"] == {"foo": 1, "enable_thinking": False}
    ask(client, LIGHT)
    assert "chat_template_kwargs" not in fakes["quick"].last["body"]


def test_a_key_default_limit_applies_without_headers(gateway: RunningGateway) -> None:
    with openai.OpenAI(base_url=gateway.base_url, api_key=KEY_B, max_retries=0) as team_b:
        assert ask(team_b, PROOF).headers["x-kvgate-route"] == "auto; reason=downgrade_ttft"
        assert ask(team_b, PROOF, headers={"X-Max-TTFT-Ms": "60000"}).headers["x-kvgate-route"] == "auto; reason=needs_reasoning"


@pytest.mark.parametrize(("header", "value"), [("X-Max-TTFT-Ms", "soon"), ("X-Max-Cost-USD", "-1")])
def test_bad_limit_headers_are_openai_400s(client: openai.OpenAI, header: str, value: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, PROOF, headers={header: value})
    assert caught.value.status_code == 400
    assert error_shape_ok(caught.value.response.json()) and caught.value.param == header


def test_a_prompt_no_cluster_holds_is_refused_before_any_upstream_call(
    client: openai.OpenAI, gateway: RunningGateway, fakes: dict[str, FakeUpstream]
) -> None:
    before = {name: len(fake.requests) for name, fake in fakes.items()}
    refused = gateway.metric("kvgate_route_context_rejections_total", model="auto")
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, "word " * 8000)
    assert caught.value.code == "context_length_exceeded" and caught.value.param == "messages"
    assert {name: len(fake.requests) for name, fake in fakes.items()} == before
    assert gateway.metric("kvgate_route_context_rejections_total", model="auto") == refused + 1


def test_a_prompt_too_long_for_fast_goes_to_reasoning(client: openai.OpenAI) -> None:
    raw = ask(client, "Translate into French: " + "bonjour " * 2500)
    assert (raw.headers["x-kvgate-route"], raw.headers["x-kvgate-cluster"]) == ("auto; reason=context_fit", "deep")


def test_models_lists_the_aliases(client: openai.OpenAI) -> None:
    ids = [model.id for model in client.models.list()]
    assert {"auto", "reasoning", "fast", "deep-public"} <= set(ids)


def test_decisions_costs_and_predictions_are_in_the_metrics(client: openai.OpenAI, gateway: RunningGateway) -> None:
    labels = {"model": "auto", "cluster": "quick", "reason": "downgrade_ttft"}
    downgrades = gateway.metric("kvgate_route_selections_total", **labels)
    cost = gateway.metric("kvgate_key_cost_usd_total", key="team-a", model="auto", cluster="deep")
    ask(client, PROOF, headers={"X-Max-TTFT-Ms": "1000"})
    with client.chat.completions.create(model="auto", messages=[{"role": "user", "content": PROOF}], stream=True,
                                        stream_options={"include_usage": True}) as stream:
        assert list(stream)
    # usage 7 prompt (4 cached) + 3 completion tokens at deep's prices
    expected = (3 * 0.55 + 4 * 0.14 + 3 * 2.19) / 1e6
    assert wait_until(lambda: gateway.metric("kvgate_key_cost_usd_total", key="team-a", model="auto", cluster="deep")
                      == pytest.approx(cost + expected))
    assert gateway.metric("kvgate_route_selections_total", **labels) == downgrades + 1
    assert 0 < gateway.metric("kvgate_cluster_predicted_ttft_seconds", cluster="deep") < 2.0


def test_admin_explain_shows_the_route_selection(gateway: RunningGateway, fakes: dict[str, FakeUpstream]) -> None:
    before = {name: len(fake.requests) for name, fake in fakes.items()}
    body = {"model": "auto", "messages": [{"role": "user", "content": PROOF}]}
    reply = httpx.post(gateway.url + "/admin/routing/explain", json=body, timeout=10,
                       headers={"Authorization": f"Bearer {ADMIN}", "X-Max-TTFT-Ms": "0.001"})
    assert reply.status_code == 200, reply.text
    selection = reply.json()["route_selection"]
    assert selection["reason"] == "downgrade_ttft" and selection["clusters"] == ["quick", "deep"]
    assert selection["need"] == "reasoning" and "proof" in selection["signals"]["cues"]
    top = selection["signals"]["top_features"]
    assert top and {"cue:proof", "verb:proof"} & {feature for feature, _ in top}
    assert all(weight > 0 for _, weight in top[:2])
    assert set(selection["cluster_state"]) == {"deep", "quick"}
    assert reply.json()["cluster"] == "quick"
    assert {name: len(fake.requests) for name, fake in fakes.items()} == before
