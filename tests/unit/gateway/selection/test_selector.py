"""The selector over real config objects: aliases in the catalog, limits, budgets, observation."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from gateway.endpoints.registry import EndpointRegistry
from gateway.errors import InvalidRequestError, StateStoreError
from gateway.keys.model import KeyLimits, KeyRecord
from gateway.keys.pricing import Pricing, TokenUsage, cost_usd
from gateway.protocol.openai import Operation, parse_request
from gateway.selection.catalog import ModelCatalog
from gateway.selection.classifier import ClassifierModel
from gateway.observability.metrics import RouteMetrics
from gateway.observability.tally import Tally
from gateway.selection.selector import RouteSelector, spent_from
from gateway.config import ConfigError, Settings, build_settings

PROOF = "Prove that there are infinitely many primes."
CONFIG: dict[str, Any] = {
    "clusters": {
        "deep": {"tier": "reasoning", "max_context_tokens": 8000,
                 "price": {"input_per_mtok": 0.55, "output_per_mtok": 2.19},
                 "selection": {"ttft_prior_ms": 2000, "slots_per_endpoint": 2, "service_prior_s": 10},
                 "endpoints": [{"name": "deep-0", "url": "http://127.0.0.1:9/v1", "model": "r1"}]},
        "quick": {"tier": "fast", "max_context_tokens": 2000, "thinking_switch": "enable-thinking",
                  "price": {"input_per_mtok": 0.1, "output_per_mtok": 0.3},
                  "selection": {"ttft_prior_ms": 100},
                  "endpoints": [{"name": "quick-0", "url": "http://127.0.0.1:9/v1", "model": "q"}]},
        "plain": {"endpoints": [{"name": "plain-0", "url": "http://127.0.0.1:9/v1", "model": "p"}]},
    },
    "models": {"r1-public": {"cluster": "deep", "failover": ["quick"]}},
    "route_selection": {"keys": {"tight": {"max_ttft_ms": 500}}},
}
KEY = KeyRecord("k", "someone", "", "")
TIGHT = KeyRecord("t", "tight", "", "")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(
    settings: Settings, spent: Any = None, clock: Clock | None = None, tallied: bool = False
) -> tuple[RouteSelector, CollectorRegistry]:
    registry = CollectorRegistry()
    tally = Tally(registry) if tallied else None  # as create_app: the gateway's tally, registered first
    selector = RouteSelector(
        settings=lambda: settings, catalog=ModelCatalog.from_settings(settings),
        registry=EndpointRegistry.from_settings(settings.clusters, settings.health, settings.circuit), pricing=Pricing.from_settings(settings.clusters),
        metrics=RouteMetrics(registry, tally), spent=spent, clock=clock or Clock(),
        model=ClassifierModel(bias=-2.0, weights={"cue:proof": 5.0}, threshold=0.5),
    )
    return selector, registry


def chat(content: str, model: str = "auto", **body: Any) -> Any:
    return parse_request(Operation.CHAT, orjson.dumps({"model": model, "messages": [{"role": "user", "content": content}], **body}))


@pytest.fixture
def selector() -> RouteSelector:
    return make(build_settings(CONFIG))[0]


def test_the_catalog_lists_the_aliases_once_clusters_have_tiers() -> None:
    catalog = ModelCatalog.from_settings(build_settings(CONFIG))
    ids = [entry.id for entry in catalog.entries()]
    assert ids == ["r1-public", "auto", "reasoning", "fast", "deep", "quick", "plain"]
    assert catalog.resolve("auto").route.clusters == ("deep", "quick")
    assert catalog.resolve("fast").selects == "fast" and catalog.resolve("deep").selects is None
    plain = ModelCatalog.from_settings(build_settings({"clusters": {"fast": {}}}))
    assert [entry.id for entry in plain.entries()] == ["fast"] and plain.resolve("fast").selects is None


def test_a_model_may_not_take_an_alias_name_once_tiers_exist() -> None:
    with pytest.raises(ConfigError, match="'auto' is a route selection alias"):
        build_settings({**CONFIG, "models": {"x": {"cluster": "deep", "aliases": ["auto"]}}})
    build_settings({"clusters": {"c": {}}, "models": {"auto": {"cluster": "c"}}})  # no tiers: allowed


@pytest.mark.parametrize(
    ("content", "model", "headers", "key", "route", "reason"),
    [
        (PROOF, "auto", {}, KEY, ("deep", "quick"), "needs_reasoning"),
        ("Translate hello into French.", "auto", {}, KEY, ("quick", "deep"), "light"),
        (PROOF, "auto", {"x-max-ttft-ms": "1000"}, KEY, ("quick", "deep"), "downgrade_ttft"),
        (PROOF, "auto", {}, TIGHT, ("quick", "deep"), "downgrade_ttft"),
        (PROOF, "auto", {"x-max-ttft-ms": "5000"}, TIGHT, ("deep", "quick"), "needs_reasoning"),
        (PROOF, "auto", {"x-max-cost-usd": "0.0001"}, KEY, ("quick", "deep"), "downgrade_cost"),
        (PROOF, "fast", {}, KEY, ("quick",), "tier"),
        (PROOF, "reasoning", {"x-max-ttft-ms": "1"}, KEY, ("deep",), "tier"),
        (PROOF, "r1-public", {"x-max-ttft-ms": "1"}, KEY, ("deep", "quick"), "model"),
        ("x" * 12_000, "r1-public", {}, KEY, ("deep",), "model"),
        ("x" * 12_000, "auto", {}, KEY, ("deep",), "context_fit"),
        (PROOF, "plain", {}, KEY, ("plain",), "cluster"),
    ],
)
async def test_select(selector: RouteSelector, content: str, model: str, headers: dict[str, str], key: KeyRecord,
                      route: tuple[str, ...], reason: str) -> None:
    routed = await selector.select(chat(content, model), key, headers)
    assert (routed.route.clusters, routed.route.reason, routed.route.name) == (route, reason, model)


async def test_a_downgraded_reasoning_request_has_thinking_switched_off(selector: RouteSelector) -> None:
    routed = await selector.select(chat(PROOF), KEY, {"x-max-ttft-ms": "1000"})
    assert orjson.loads(routed.request.raw)["chat_template_kwargs"] == {"enable_thinking": False}
    light = await selector.select(chat("Say hi"), KEY, {})
    assert "chat_template_kwargs" not in light.request.body


async def test_a_prompt_no_cluster_holds_is_refused_and_counted() -> None:
    selector, registry = make(build_settings(CONFIG))
    with pytest.raises(InvalidRequestError) as caught:
        await selector.select(chat("x" * 40_000), KEY, {})
    assert caught.value.code == "context_length_exceeded"
    assert registry.get_sample_value("kvgate_route_context_rejections_total", {"model": "auto"}) == 1.0


async def test_budget_low_downgrades_and_is_read_once_per_ttl() -> None:
    calls: list[str] = []
    clock = Clock()

    async def spent(key: KeyRecord) -> float:
        calls.append(key.id)
        return 9.5

    selector, _ = make(build_settings(CONFIG), spent=spent, clock=clock)
    metered = KeyRecord("m", "metered", "", "", KeyLimits(budget_usd=10.0))
    first = await selector.select(chat(PROOF), metered, {})
    second = await selector.select(chat(PROOF), metered, {})
    clock.now += 2.0
    await selector.select(chat(PROOF), metered, {})
    assert (first.route.reason, second.route.reason) == ("downgrade_budget", "downgrade_budget")
    assert first.limits.budget_left_usd == pytest.approx(0.5) and calls == ["m", "m"]


async def test_a_failing_budget_read_means_unknown() -> None:
    async def spent(key: KeyRecord) -> float:
        raise StateStoreError("down")

    selector, _ = make(build_settings(CONFIG), spent=spent)
    routed = await selector.select(chat(PROOF), KeyRecord("m", "m", "", "", KeyLimits(budget_usd=1.0)), {})
    assert (routed.route.reason, routed.limits.budget_left_usd) == ("needs_reasoning", None)


async def test_spent_from_reads_the_quota_store_in_usd() -> None:
    seen: list[Any] = []

    async def store_spent(key_id: str, limits: KeyLimits, now: float) -> int:
        seen.append((key_id, now))
        return 2_500_000

    gate = SimpleNamespace(store=SimpleNamespace(spent=store_spent), now=lambda: 42.0)
    assert await spent_from(gate)(KEY) == 2.5 and seen == [("k", 42.0)]


class FakeExchange:
    def __init__(self, **fields: Any) -> None:
        self.model, self.cluster, self.outcome, self.started = "auto", "deep", "success", 0.0
        self.first_token_at, self.ended_at, self.usage, self.admission = 3.0, 10.0, None, None
        self.listeners: list[Any] = []
        self.__dict__.update(fields)
        self.tokens = TokenUsage.from_openai(self.usage)  # as Exchange.finish sets it

    def add_listener(self, callback: Any) -> None:
        self.listeners.append(callback)


@pytest.mark.parametrize("tallied", [False, True])
async def test_attach_counts_the_decision_and_finishing_feeds_the_load_model(tallied: bool) -> None:
    """The selection count reads the same whether it goes straight to its counter or through the tally."""
    selector, registry = make(build_settings(CONFIG), tallied=tallied)
    routed = await selector.select(chat(PROOF), KEY, {})
    usage = {"prompt_tokens": 1000, "completion_tokens": 2000, "prompt_tokens_details": {"cached_tokens": 0}}
    exchange = FakeExchange(usage=usage, admission=SimpleNamespace(key=KEY))
    selector.attach(exchange, routed)
    assert exchange.selection is routed and exchange.listeners == []  # the close-out calls finished, no listener
    labels = {"model": "auto", "cluster": "deep", "reason": "needs_reasoning"}
    assert registry.get_sample_value("kvgate_route_selections_total", labels) == 1.0
    selector.finished(exchange, cost_usd(selector.profiles()["deep"].price, exchange.tokens))  # as the close-out prices it
    view = selector.views(["deep"])["deep"]
    assert view.base_ttft_s == pytest.approx(2.0 + 0.2 * (3.0 - 2.0))
    cost = (1000 * 0.55 + 2000 * 2.19) / 1e6
    key_labels = {"key": "someone", "model": "auto", "cluster": "deep"}
    assert registry.get_sample_value("kvgate_key_cost_usd_total", key_labels) == pytest.approx(cost)
    assert registry.get_sample_value("kvgate_cluster_predicted_ttft_seconds", {"cluster": "deep"}) == pytest.approx(2.2)


@pytest.mark.parametrize("outcome", ["client_error", "cancelled"])
async def test_client_errors_and_cancels_teach_nothing(selector: RouteSelector, outcome: str) -> None:
    selector.finished(FakeExchange(outcome=outcome, first_token_at=99.0), 0.0)
    assert selector.views(["deep"])["deep"].base_ttft_s == pytest.approx(2.0)


async def test_explain(selector: RouteSelector) -> None:
    routed = await selector.select(chat(PROOF), KEY, {"x-max-ttft-ms": "1000"})
    explained = selector.explain(routed)
    assert explained["reason"] == "downgrade_ttft" and explained["clusters"] == ["quick", "deep"]
    assert explained["need"] == "reasoning" and explained["thinking_off"] is True
    assert explained["signals"]["cues"] == ["math", "proof"] and explained["limits"]["max_ttft_ms"] == 1000.0
    assert explained["cluster_state"]["deep"]["predicted_ttft_ms"] == 2000.0
    assert explained["cluster_state"]["quick"]["fits"] is True
    assert orjson.dumps(explained)
