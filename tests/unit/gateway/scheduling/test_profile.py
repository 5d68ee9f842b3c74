"""The profile scheduler end to end over pure parts: producers with deadlines, affinity, hot spots,
the breakdown, commit/observe and the closed loop."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from gateway.endpoints.metrics_parse import EngineStats
from gateway.endpoints.model import Endpoint, Health
from gateway.endpoints.stats import StatsBoard
from gateway.prefix.hashing import PrefixKey, PromptHasher
from gateway.config import ProfileSettings, RoutingSettings
from gateway.scheduling.feedback import PrefixFeedback
from gateway.observability.metrics import RoutingMetrics
from gateway.scheduling.producers import run_producers
from gateway.scheduling.profile import ProfileScheduler, UnknownPluginError
from gateway.scheduling.registry import PluginDeps
from gateway.scheduling.types import PENDING, Context
from gateway.state.memory import MemoryStore
from tests.unit.gateway.scheduling.support import chat, context, endpoint

LONG = "Tenant handbook: answer politely and cite the policy section. " * 40


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def build(profile: ProfileSettings | None = None, **routing: Any) -> tuple[ProfileScheduler, MemoryStore, StatsBoard, PrefixFeedback, RoutingMetrics, Clock]:
    settings = RoutingSettings(**routing)
    store = MemoryStore()
    metrics = RoutingMetrics(CollectorRegistry())
    feedback = PrefixFeedback(settings.index, store, metrics, 200.0)
    board = StatsBoard()
    clock = Clock()
    scheduler = ProfileScheduler(
        "p", profile or ProfileSettings(), settings, PluginDeps(store, random.Random(7)), hasher=PromptHasher(),
        board=board, feedback=feedback, metrics=metrics, clock=clock,
    )
    return scheduler, store, board, feedback, metrics, clock


async def route(scheduler: ProfileScheduler, endpoints: Sequence[Endpoint], content: str, **fields: Any) -> Any:
    decision = await scheduler.schedule(endpoints, chat(content, **fields))
    decision.commit(decision.ranked[0])
    return decision


async def test_same_prefix_goes_to_the_same_endpoint_and_others_spread() -> None:
    scheduler, *_ = build(ProfileSettings(filters=[]))
    group = [endpoint(f"e{i}") for i in range(4)]
    firsts = {}
    for tenant in range(8):
        first = (await route(scheduler, group, f"{tenant} {LONG}")).ranked[0].name
        again = [(await route(scheduler, group, f"{tenant} {LONG}")).ranked[0].name for _ in range(3)]
        assert again == [first] * 3
        firsts[tenant] = first
    assert len(set(firsts.values())) >= 3  # cold prompts are spread by the random tie-break


async def test_hot_spot_guard_moves_a_hot_prefix_off_a_loaded_endpoint() -> None:
    scheduler, _, _, _, metrics, _ = build(ProfileSettings(filters=["bounded-load"]))
    group = [endpoint(f"e{i}") for i in range(4)]
    home = (await route(scheduler, group, LONG)).ranked[0]
    home.in_flight = 3  # three long requests of the hot tenant already there, none elsewhere
    decision = await scheduler.schedule(group, chat(LONG))
    assert decision.ranked[0] is not home
    assert decision.filtered == [home.name] and decision.ranked[-1] is home
    assert decision.breakdown[home.name]["prefix"] > 0.9
    assert metrics.hot_spot_diversions.labels("c")._value.get() == 1


async def test_affinity_key_keeps_a_conversation_together_without_shared_blocks() -> None:
    scheduler, *_ = build()
    group = [endpoint(f"e{i}") for i in range(4)]
    first = (await route(scheduler, group, "short one", prompt_cache_key="conv-1")).ranked[0].name
    for text in ("another short", "and a third"):
        decision = await route(scheduler, group, text, prompt_cache_key="conv-1")
        assert decision.ranked[0].name == first and decision.breakdown[first]["session"] == 1.0


async def test_ejected_go_last_unscored_and_draining_are_dropped() -> None:
    scheduler, *_ = build()
    group = [endpoint(f"e{i}") for i in range(3)]
    group[0].health = Health.UNHEALTHY
    group[1].draining = True
    decision = await scheduler.schedule(group, chat("x"))
    assert [e.name for e in decision.ranked] == ["e2", "e0"]
    group[2].health = Health.UNHEALTHY
    assert [e.name for e in (await scheduler.schedule(group, chat("x"))).ranked] == ["e0", "e2"]  # all ejected: as given


async def test_stale_engine_stats_are_neutral() -> None:
    scheduler, _, board, _, _, clock = build(ProfileSettings(scorers={"queue": 1.0}))
    group = [endpoint("a"), endpoint("b")]
    board.put("a", EngineStats("vllm", waiting=12), at=clock.now)
    board.put("b", EngineStats("vllm", waiting=0), at=clock.now - 60)  # stale
    decision = await scheduler.schedule(group, chat("x"))
    assert decision.breakdown["a"]["queue"] == pytest.approx(0.25)
    assert decision.breakdown["b"]["queue"] == 0.5
    explained = decision.explain()
    assert explained["ranked"] == ["b", "a"] and explained["endpoints"][0]["stale_stats"] is True


async def test_an_idle_cluster_keeps_a_shared_prefix_on_one_endpoint() -> None:
    """Issue 16: 40 sequential requests sharing a system prompt went 10/10/10/10 over idle endpoints."""
    scheduler, *_ = build()
    group = [endpoint(f"e{i}") for i in range(4)]
    homes = [(await route(scheduler, group, LONG)).ranked[0].name for _ in range(40)]
    assert len(set(homes)) == 1, {name: homes.count(name) for name in set(homes)}


async def test_bounded_share_spreads_a_hot_prefix_over_loaded_endpoints() -> None:
    scheduler, _, board, _, _, clock = build()
    group = [endpoint(f"e{i}") for i in range(4)]
    for e in group:  # every engine queues requests: the load is real
        board.put(e.name, EngineStats("vllm", waiting=3, kv_usage=0.5), at=clock.now)
    homes = [(await route(scheduler, group, LONG)).ranked[0].name for _ in range(40)]
    counts = {name: homes.count(name) for name in set(homes)}
    assert max(counts.values()) <= 1.25 * 40 / 4 + 1, counts
    decision = await scheduler.schedule(group, chat(LONG))
    assert all(row["loaded"] for row in decision.explain()["endpoints"])


async def test_closed_loop_learns_from_reported_cached_tokens() -> None:
    scheduler, store, _, feedback, metrics, _ = build()
    group = [endpoint("a")]
    first = await route(scheduler, group, LONG)
    first.observe(group[0], {"prompt_tokens": 600, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0}})
    second = await route(scheduler, group, LONG)
    predicted = second.predicted("a")
    assert predicted > 0 and predicted % 16 == 0
    assert second.observe(group[0], {"prompt_tokens": 600, "completion_tokens": 5,
                                     "prompt_tokens_details": {"cached_tokens": predicted}}) is None
    assert metrics.predictions.labels("a", "exact")._value.get() >= 1
    before = feedback.capacity_blocks("a")
    third = await route(scheduler, group, LONG)
    third.observe(group[0], {"prompt_tokens": 600, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0}})
    assert metrics.predictions.labels("a", "over")._value.get() == 1
    assert feedback.capacity_blocks("a") < before  # the engine evicted what the index held: shrink
    assert feedback.accuracy("a") is not None and 0 <= feedback.accuracy("a") <= 1
    assert feedback.bytes_per_token("a") == pytest.approx(len(LONG) / 600, rel=0.1)
    assert store.size("a") > 0


async def test_unknown_plugin_names_fail_at_build() -> None:
    with pytest.raises(UnknownPluginError, match="unknown scorer 'nope'"):
        build(ProfileSettings(scorers={"nope": 1.0}))
    with pytest.raises(UnknownPluginError, match="unknown filter"):
        build(ProfileSettings(filters=["nope"]))


class Slow:
    async def produce(self, ctx: Context, endpoints: Sequence[Endpoint]) -> Any:
        await asyncio.sleep(10)


class Broken:
    async def produce(self, ctx: Context, endpoints: Sequence[Endpoint]) -> Any:
        raise RuntimeError("boom")


class Quick:
    async def produce(self, ctx: Context, endpoints: Sequence[Endpoint]) -> Any:
        return "hint"


@pytest.mark.parametrize(
    ("producers", "hints", "failures"),
    [
        ({"quick": Quick()}, {"quick": "hint"}, {}),
        ({"slow": Slow()}, {}, {("slow", "timeout"): 1}),
        ({"broken": Broken()}, {}, {("broken", "error"): 1}),
        ({"quick": Quick(), "slow": Slow(), "broken": Broken()}, {"quick": "hint"},
         {("slow", "timeout"): 1, ("broken", "error"): 1}),
        ({}, {}, {}),
    ],
)
async def test_producers_drop_hints_on_deadline_or_failure(producers: dict[str, Any], hints: dict[str, Any],
                                                            failures: dict[tuple[str, str], int]) -> None:
    metrics = RoutingMetrics(CollectorRegistry())
    got = await run_producers(producers, context(), [endpoint("a")], 0.02, metrics)
    assert got == hints
    for (name, reason), count in failures.items():
        assert metrics.producer_failures.labels(name, reason)._value.get() == count


async def test_a_failing_store_never_fails_the_request() -> None:
    scheduler, store, *_ = build()

    async def boom(endpoints: Sequence[str], key: PrefixKey) -> Any:
        raise ConnectionError("down")

    def broken_peek(endpoints: Sequence[str], key: PrefixKey) -> Any:
        raise ConnectionError("down")

    store.lookup = boom  # type: ignore[method-assign]
    store.peek = broken_peek  # type: ignore[method-assign]
    decision = await scheduler.schedule([endpoint("a"), endpoint("b")], chat(LONG))
    assert len(decision.ranked) == 2 and "state" not in decision.hints


class Immediate:
    """Answers at once when it can (``produce_now``), else like any producer."""

    def __init__(self, now: Any) -> None:
        self.now = now
        self.awaited = 0

    def produce_now(self, ctx: Context, endpoints: Sequence[Endpoint]) -> Any:
        if isinstance(self.now, Exception):
            raise self.now
        return self.now

    async def produce(self, ctx: Context, endpoints: Sequence[Endpoint]) -> Any:
        self.awaited += 1
        return "awaited"


@pytest.mark.parametrize(
    ("now", "hint", "awaited", "errors"),
    [("at once", "at once", 0, 0), (PENDING, "awaited", 1, 0), (RuntimeError("boom"), None, 0, 1)],
)
async def test_producers_answer_at_once_when_they_can(now: Any, hint: Any, awaited: int, errors: int) -> None:
    metrics = RoutingMetrics(CollectorRegistry())
    producer = Immediate(now)
    got = await run_producers({"p": producer}, context(), [endpoint("a")], 0.02, metrics)
    assert got.get("p") == hint and producer.awaited == awaited
    assert metrics.producer_failures.labels("p", "error")._value.get() == errors


async def test_memory_store_answers_without_awaiting() -> None:
    store = MemoryStore()
    key = PrefixKey((1, 2, 3), None, 768, 256)
    store.record("a", key)
    view = store.peek(["a", "b"], key)
    assert view is not None and view.matched == {"a": 3, "b": 0}


async def test_explained_totals_are_the_weighted_sums_of_the_breakdown() -> None:
    profile = ProfileSettings()
    scheduler, *_ = build(profile)
    group = [endpoint(f"e{i}") for i in range(3)]
    await route(scheduler, group, LONG)
    decision = await scheduler.schedule(group, chat(LONG))
    for row in decision.explain()["endpoints"]:
        expected = sum(profile.scorers[name] * score for name, score in row["scores"].items())
        assert row["total"] == pytest.approx(expected)


async def test_a_single_candidate_is_chosen_unscored_and_explained_with_the_same_scores() -> None:
    """One routable endpoint: nothing to rank; the scores are computed when read, and are those a
    scheduler that scored eagerly gives (the same inputs: candidates are snapshots)."""
    profile = ProfileSettings()
    lazy, *_ = build(profile)
    eager, *_ = build(profile)
    only, sick = endpoint("only"), endpoint("sick")
    sick.health = Health.UNHEALTHY
    decision = await lazy.schedule([only, sick], chat(LONG))
    assert decision.ranked == [only, sick]  # the ejected one still goes last
    assert decision.breakdown._table is None and callable(decision.breakdown._scores)  # nothing scored yet
    scores = dict(decision.breakdown["only"])
    assert set(scores) == set(profile.scorers)
    ctx = Context("c", chat(LONG), decision.key, RoutingSettings().hot_spot)
    columns, totals, offset = eager._score(ctx, decision._candidates)
    assert scores == {name: column[0] for name, column in columns}
    assert decision.totals == {"only": pytest.approx(totals[0] + offset)}
    row = decision.explain()["endpoints"][0]
    assert row["name"] == "only" and row["total"] == pytest.approx(sum(profile.scorers[n] * s for n, s in scores.items()))


@pytest.mark.parametrize("precise", [None, 48])
@pytest.mark.parametrize("which", [0, 2])
async def test_commit_records_what_predicted_gives_and_the_index_guess_for_the_counters(
    precise: int | None, which: int
) -> None:
    """``commit`` computes the prediction once: the record keeps ``predicted(name)`` (exact when the
    candidate's KV events know it), the counters' window the index's guess; for the first-ranked
    endpoint and for one further down the ranking (a failover attempt)."""
    scheduler, _, _, feedback, _, _ = build(ProfileSettings(filters=[]))
    group = [endpoint(f"e{i}") for i in range(3)]
    warm = await route(scheduler, group, LONG)
    warm.observe(warm.ranked[0], {"prompt_tokens": 600, "completion_tokens": 5})
    decision = await scheduler.schedule(group, chat(LONG))
    target = decision.ranked[which]
    candidate = decision.candidates[target.spec.name]
    candidate.precise = precise
    expected = decision.predicted(target.spec.name)
    guess = feedback.predict(candidate.name, candidate.matched, decision.key)
    assert expected == (guess if precise is None else precise)
    assert guess > 0 or which != 0  # the warm endpoint comes first and holds the prompt
    window = dict(feedback._window)
    decision.commit(target)
    assert decision.predicted_cached == expected
    assert feedback._window[target.spec.name] == window.get(target.spec.name, 0.0) + guess
