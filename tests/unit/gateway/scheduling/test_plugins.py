"""Scorers, filters (the hot-spot guard) and the picker: pure functions over candidates, table-driven."""

from __future__ import annotations

import random
from typing import Any

import pytest

from gateway.scheduling import registry
from gateway.scheduling.filters import BoundedLoadFilter, BoundedShareFilter
from gateway.scheduling.pickers import MaxScorePicker
from gateway.scheduling.scorers.assignments import AssignmentsScorer
from gateway.scheduling.scorers.inflight import InFlightScorer
from gateway.scheduling.scorers.kv_usage import KvUsageScorer
from gateway.scheduling.scorers.latency import LatencyScorer
from gateway.scheduling.scorers.prefill import PrefillScorer
from gateway.scheduling.scorers.prefix import PrefixScorer
from gateway.scheduling.scorers.queue import QueueScorer
from gateway.scheduling.scorers.session import SessionScorer
from tests.unit.gateway.scheduling.support import candidate, context, stats

SCORER_CASES: list[tuple[str, Any, list[dict[str, Any]], list[float]]] = [
    ("prefix fraction", PrefixScorer(), [{"matched": 10}, {"matched": 5}, {"matched": 0}], [1.0, 0.5, 0.0]),
    ("prefix capped", PrefixScorer(), [{"matched": 99}], [1.0]),
    ("session", SessionScorer(), [{"affinity": True}, {"affinity": False}], [1.0, 0.0]),
    ("queue saturating", QueueScorer(), [{"stats": stats(waiting=0)}, {"stats": stats(waiting=4)}, {"stats": stats(waiting=12)}], [1.0, 0.5, 0.25]),
    ("queue stale is neutral", QueueScorer(), [{"stats": None}, {"stats": stats()}], [0.5, 0.5]),
    ("kv usage", KvUsageScorer(), [{"stats": stats(kv_usage=0.25)}, {"stats": stats(kv_usage=1.5)}, {"stats": None}], [0.75, 0.0, 0.5]),
    ("in-flight relative", InFlightScorer(), [{"in_flight": 0}, {"in_flight": 2}, {"in_flight": 4}], [1.0, 0.5, 0.0]),
    ("in-flight per weight", InFlightScorer(), [{"in_flight": 4, "weight": 4.0}, {"in_flight": 2}], [0.5, 0.0]),
    ("in-flight idle cluster", InFlightScorer(), [{"in_flight": 0}, {"in_flight": 0}], [1.0, 1.0]),
    ("latency best over own", LatencyScorer(), [{"latency": 0.01}, {"latency": 0.04}, {"latency": None}], [1.0, 0.25, 1.0]),
    ("latency unknown", LatencyScorer(), [{}, {}], [1.0, 1.0]),
    ("assignments relative", AssignmentsScorer(), [{"recent": 0.0}, {"recent": 3.0}, {"recent": 6.0}], [1.0, 0.5, 0.0]),
    ("assignments per weight", AssignmentsScorer(), [{"recent": 8.0, "weight": 4.0}, {"recent": 4.0}], [0.5, 0.0]),
    ("assignments none yet", AssignmentsScorer(), [{}, {}], [1.0, 1.0]),
    # context(blocks=10): a 2,560-byte prompt; work = prefill in flight + bytes not matched
    ("prefill warm beats cold", PrefillScorer(), [{"matched": 10}, {"matched": 0}], [1.0, 4096 / (2560 + 4096)]),
    ("prefill busy warm loses", PrefillScorer(), [{"matched": 10, "prefill": 20_000.0}, {"matched": 0}],
     [(2560 + 4096) / (20_000 + 4096), 1.0]),
    ("prefill idle and equal", PrefillScorer(), [{}, {}], [1.0, 1.0]),
]


@pytest.mark.parametrize(("scorer", "fields", "expected"), [c[1:] for c in SCORER_CASES], ids=[c[0] for c in SCORER_CASES])
def test_scorers(scorer: Any, fields: list[dict[str, Any]], expected: list[float]) -> None:
    candidates = [candidate(f"e{i}", **f) for i, f in enumerate(fields)]
    scores = scorer.score(context(blocks=10), candidates)
    assert scores == pytest.approx(expected)
    assert all(0.0 <= s <= 1.0 for s in scores)


def test_prefix_scorer_without_blocks_is_flat() -> None:
    assert PrefixScorer().score(context(blocks=0), [candidate(matched=0), candidate(matched=0)]) == [0.0, 0.0]


GUARD_CASES = [
    # (in-flight per candidate, load factor, eligible indices)
    ([0, 0, 0, 0], 1.25, [0, 1, 2, 3]),
    ([1, 0, 0, 0], 1.25, [1, 2, 3]),          # T=1: cap ceil(1.25*2/4)=1
    ([2, 2, 2, 2], 1.25, [0, 1, 2, 3]),       # T=8: cap ceil(1.25*9/4)=3
    ([3, 1, 1, 1], 1.25, [1, 2, 3]),          # T=6: cap ceil(1.25*7/4)=3: 3+1 > 3
    ([9, 0, 0, 0], 2.0, [1, 2, 3]),
    ([5, 5], 1.0, [0, 1]),                    # never empty: equal loads stay eligible
    ([4, 0], 100.0, [0, 1]),                  # a huge factor disables the guard
]


@pytest.mark.parametrize(("loads", "factor", "eligible"), GUARD_CASES)
def test_bounded_load_guard(loads: list[int], factor: float, eligible: list[int]) -> None:
    candidates = [candidate(f"e{i}", in_flight=n) for i, n in enumerate(loads)]
    kept = BoundedLoadFilter().filter(context(load_factor=factor), candidates)
    assert [candidates.index(c) for c in kept] == eligible


def test_guard_never_empties_and_respects_weights() -> None:
    heavy = [candidate("big", in_flight=6, weight=3.0), candidate("small", in_flight=2)]
    assert [c.name for c in BoundedLoadFilter().filter(context(), heavy)] == ["big", "small"]
    assert BoundedLoadFilter().filter(context(), []) == []


def test_bounded_share_uses_recent_assignments_above_its_floor() -> None:
    busy = stats(waiting=2)  # loaded: the share bound applies (issue 16: only then)
    candidates = [candidate(n, recent=r, stats=busy) for n, r in (("a", 60.0), ("b", 20.0), ("c", 20.0))]
    assert [c.name for c in BoundedShareFilter().filter(context(), candidates)] == ["b", "c"]
    young = [candidate("a", recent=5.0, stats=busy), candidate("b", recent=0.0, stats=busy)]
    assert [c.name for c in BoundedShareFilter().filter(context(), young)] == ["a", "b"]


@pytest.mark.parametrize(
    ("fields", "capped"),
    [
        ({}, False),                                        # idle: affinity holds
        ({"in_flight": 1}, False),                          # below busy_in_flight (2)
        ({"in_flight": 2}, True),
        ({"in_flight": 3, "weight": 2.0}, False),           # 1.5 per unit of weight
        ({"stats": stats(waiting=0, kv_usage=0.5)}, False),
        ({"stats": stats(waiting=1)}, True),                # the engine queues requests
        ({"stats": stats(kv_usage=0.85)}, True),            # its KV cache is nearly full
    ],
)
def test_bounded_share_caps_only_a_loaded_endpoint(fields: dict, capped: bool) -> None:
    hot = candidate("hot", recent=60.0, **fields)
    others = [candidate("b", recent=20.0), candidate("c", recent=20.0)]
    kept = [c.name for c in BoundedShareFilter().filter(context(), [hot, *others])]
    assert kept == (["b", "c"] if capped else ["hot", "b", "c"])


def test_max_score_picker_ranks_and_breaks_ties_at_random() -> None:
    candidates = [candidate(f"e{i}") for i in range(3)]
    picker = MaxScorePicker(random.Random(1))
    assert picker.pick(context(), candidates, [0.2, 0.9, 0.5]) == [1, 2, 0]
    firsts = {picker.pick(context(), candidates, [1.0, 1.0, 1.0])[0] for _ in range(50)}
    assert firsts == {0, 1, 2}


def test_registry_names_are_kebab_case_and_complete() -> None:
    assert set(registry.SCORERS) == {
        "prefix", "precise-prefix", "session", "queue", "kv-usage", "in-flight", "latency", "assignments", "prefill",
    }
    assert set(registry.FILTERS) == {"bounded-load", "bounded-share"}
    assert set(registry.PICKERS) == {"max-score"} and set(registry.PRODUCERS) == {"state", "tokenize"}
    for table in (registry.SCORERS, registry.FILTERS, registry.PICKERS, registry.PRODUCERS):
        assert all(name == name.lower() and "_" not in name for name in table)
