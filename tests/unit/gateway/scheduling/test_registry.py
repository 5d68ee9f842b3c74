"""The one plugin registry: declared plugins (type, name, params), resolution by name, errors, the clamp."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gateway.config import ConfigError, ProfileSettings, build_settings, load_settings
from gateway.endpoints.metrics_parse import EngineStats
from gateway.scheduling import registry
from gateway.scheduling.registry import PLUGINS, PluginType, UnknownPluginError
from gateway.scheduling.types import Candidate, Context, NoParams
from tests.unit.gateway.scheduling.support import chat, endpoint, scheduler

EXAMPLE = Path(__file__).resolve().parents[4] / "config.example.toml"

QUEUE_FAST = {"type": "queue", "name": "queue-fast", "params": {"half": 1.0}}

ERRORS: list[tuple[str, list[dict[str, Any]], dict[str, Any], type[Exception], str]] = [
    # (case, [[routing.plugins]], profile fields, error, message)
    ("unknown type", [{"type": "queu", "name": "q"}], {}, UnknownPluginError,
     r"routing\.plugins\[q\]: unknown plugin type 'queu'; known: assignments, "),
    ("unknown type, default name", [{"type": "queu"}], {}, UnknownPluginError, r"routing\.plugins\[queu\]: unknown plugin type 'queu'"),
    ("bad param value", [{"type": "queue", "name": "queue-fast", "params": {"half": -1}}], {}, ConfigError,
     r"routing\.plugins\[queue-fast\]\.params: half: Input should be greater than 0"),
    ("boolean for a number", [{"type": "queue", "name": "queue-fast", "params": {"half": True}}], {}, ConfigError,
     r"routing\.plugins\[queue-fast\]\.params: half: .*must be a number, not a boolean \(got true\)"),
    ("unknown param", [{"type": "queue", "name": "queue-fast", "params": {"halff": 4}}], {}, ConfigError,
     r"routing\.plugins\[queue-fast\]\.params: halff: Extra inputs are not permitted"),
    ("param of a type that takes none", [{"type": "prefix", "name": "p2", "params": {"x": 1}}], {}, ConfigError,
     r"routing\.plugins\[p2\]\.params: x: Extra inputs are not permitted"),
    ("bad choice", [{"type": "max-score", "name": "m", "params": {"ties": "sometimes"}}], {}, ConfigError,
     r"routing\.plugins\[m\]\.params: ties: Input should be 'random' or 'rotate'"),
    ("unknown scorer", [], {"scorers": {"nope": 1.0}}, UnknownPluginError, r"routing\.profiles\.p: unknown scorer 'nope'"),
    ("unknown picker", [], {"picker": "best"}, UnknownPluginError, r"unknown picker 'best'; known: max-score, rotating"),
    ("a type of another kind", [], {"scorers": {"bounded-load": 1.0}}, UnknownPluginError,
     r"'bounded-load' is a filter \(type 'bounded-load'\), not a scorer"),
    ("a declared name of another kind", [QUEUE_FAST], {"filters": ["queue-fast"]}, UnknownPluginError,
     r"'queue-fast' is a scorer \(type 'queue'\), not a filter"),
]


@pytest.mark.parametrize(("plugins", "fields", "error", "message"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_bad_plugins_fail_at_build_naming_the_culprit(
    plugins: list[dict[str, Any]], fields: dict[str, Any], error: type[Exception], message: str,
) -> None:
    with pytest.raises(error, match=message) as caught:
        scheduler("p", ProfileSettings(**fields), plugins=plugins)
    assert isinstance(caught.value, ConfigError)  # the CLI prints it and exits 2, as for any bad config


@pytest.mark.parametrize(
    ("plugins", "message"),
    [
        ([{"type": "queue", "name": "a"}, {"type": "prefix", "name": "a"}], "duplicate plugin name 'a'"),
        ([{"type": "queue"}, {"type": "queue", "params": {"half": 2}}], "duplicate plugin name 'queue'"),
        ([{"type": "max-score", "name": "rotating"}], r"duplicate plugin name 'rotating' \(a built-in plugin\)"),
    ],
)
def test_duplicate_plugin_names_fail_at_load(plugins: list[dict[str, Any]], message: str) -> None:
    with pytest.raises(ConfigError, match=r"routing\.plugins\[1?0?\]: " + message):
        build_settings({"routing": {"plugins": plugins}})


def _queue_scores(sched: Any) -> dict[str, float]:
    busy, idle = endpoint("busy"), endpoint("idle")
    sched._board.put("busy", EngineStats("vllm", waiting=1), at=sched.clock())
    sched._board.put("idle", EngineStats("vllm", waiting=0), at=sched.clock())
    return {name: row["queue-fast" if "queue-fast" in row else "queue"] for name, row in _breakdown(sched, [busy, idle]).items()}


def _breakdown(sched: Any, group: Sequence[Any]) -> dict[str, dict[str, float]]:
    import asyncio

    decision = asyncio.run(sched.schedule(group, chat("x")))
    return {name: dict(decision.breakdown[name]) for name in decision.breakdown}


def test_profiles_refer_to_declared_plugins_by_name_and_to_types_with_defaults() -> None:
    declared = scheduler("p", ProfileSettings(scorers={"queue-fast": 1.0}), plugins=[QUEUE_FAST])
    assert _queue_scores(declared) == {"busy": 0.5, "idle": 1.0}  # half = 1: one waiting request scores 0.5
    by_type = scheduler("p", ProfileSettings(scorers={"queue": 1.0}))
    assert _queue_scores(by_type) == {"busy": pytest.approx(0.8), "idle": 1.0}  # the default half = 4


def test_a_declared_name_may_shadow_its_type_name() -> None:
    """``type = "queue"`` without a name is called ``queue``: that profile slot gets its parameters."""
    sched = scheduler("p", ProfileSettings(scorers={"queue": 1.0}), plugins=[{"type": "queue", "params": {"half": 1}}])
    assert _queue_scores(sched) == {"busy": 0.5, "idle": 1.0}


class Wild:
    """A scorer that ignores the [0, 1] contract."""

    def score(self, ctx: Context, candidates: Sequence[Candidate]) -> list[float]:
        return [-1.0, 0.5, 3.0, math.nan][: len(candidates)]


def test_the_framework_clamps_every_score_to_the_unit_interval() -> None:
    types = {**PLUGINS, "wild": PluginType("scorer", NoParams, lambda p, deps: Wild())}
    sched = scheduler("p", ProfileSettings(producers=[], filters=[], scorers={"wild": 1.0}), types=types)
    group = [endpoint(f"e{i}") for i in range(4)]
    scores = {name: row["wild"] for name, row in _breakdown(sched, group).items()}
    assert scores == {"e0": 0.0, "e1": 0.5, "e2": 1.0, "e3": 0.0}


def test_every_type_builds_with_its_defaults_and_names_its_kind() -> None:
    deps = registry.PluginDeps(None, None)  # type: ignore[arg-type]
    for name, plugin_type in PLUGINS.items():
        assert plugin_type.kind in ("producer", "filter", "scorer", "picker"), name
        assert plugin_type.build(plugin_type.params(), deps) is not None
    kinds = [registry.PRODUCERS, registry.FILTERS, registry.SCORERS, registry.PICKERS]
    assert sorted(n for table in kinds for n in table) == sorted(PLUGINS)  # views of one table, no other registry


def test_the_example_config_declares_plugins_that_build() -> None:
    routing = load_settings(EXAMPLE).routing
    assert routing.plugins, "config.example.toml shows a [[routing.plugins]] declaration"
    declared = registry.declare(routing.all_plugins())
    for name, profile in routing.all_profiles().items():
        scheduler(name, profile, **routing.model_dump())
    assert {p.ref for p in routing.plugins} <= set(declared)


class Typed:
    """A producer that answers at once and writes its answer into the typed field."""

    def __init__(self, fail_write: bool = False) -> None:
        self.fail_write = fail_write

    def produce_now(self, ctx: Context, endpoints: Sequence[Any]) -> Any:
        return "view"

    async def produce(self, ctx: Context, endpoints: Sequence[Any]) -> Any:
        return "view"

    def write(self, hints: Any, value: Any) -> None:
        if self.fail_write:
            raise RuntimeError("boom")
        hints.state = value


async def test_producers_write_typed_hints_and_a_failing_write_drops_only_its_hint() -> None:
    from prometheus_client import CollectorRegistry

    from gateway.observability.metrics import RoutingMetrics
    from gateway.scheduling.producers import gather_hints
    from tests.unit.gateway.scheduling.support import context

    metrics = RoutingMetrics(CollectorRegistry())
    hints = await gather_hints({"good": Typed(), "bad": Typed(fail_write=True)}, context(), [endpoint("a")], 0.02, metrics)
    assert hints.state == "view" and list(hints) == ["good"] and "bad" not in hints
    assert metrics.producer_failures.labels("bad", "error")._value.get() == 1


def test_the_basic_policies_keep_working_as_config_and_need_no_scraping() -> None:
    from prometheus_client import CollectorRegistry

    from gateway.config import RoutingSettings, StateSettings
    from gateway.scheduling.service import SchedulingService
    from gateway.state.memory import MemoryStore

    for policy, closed in (("least-in-flight", False), ("round-robin", False), ("prefix-aware", True)):
        service = SchedulingService(RoutingSettings(policy=policy), StateSettings(), None,  # type: ignore[arg-type]
                                    metrics_registry=CollectorRegistry(), store=MemoryStore())
        assert service.scheduler.name == policy and service.uses_profile is closed
