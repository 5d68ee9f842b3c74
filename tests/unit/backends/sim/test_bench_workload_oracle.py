"""The testbed's pure parts: workload shapes, trace files, the oracle, the report, the fit."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from backends.sim.presets import get_preset
from bench.calibrate import fit_line
from bench.oracle import oracle
from bench.replay import ReplayResult, RequestResult
from bench.report import WorkerStats, format_json, format_table, parse_worker_metrics, policy_row
from bench.trace import Trace, TraceRequest, load_trace, percentile, save_trace
from bench.workload import PROFILES, WorkloadSpec, generate

SMALL = replace(PROFILES["shared-prefix"], requests=120, system_words=200, document_words=300,
                cold_words=(50, 100), rate=20.0)


def test_generation_is_deterministic_in_the_seed() -> None:
    assert generate(SMALL) == generate(SMALL)
    assert generate(SMALL) != generate(replace(SMALL, seed=1))


def test_arrivals_are_poisson_at_the_rate() -> None:
    trace = generate(replace(SMALL, requests=2000, rate=50.0))
    gaps = [b.t - a.t for a, b in itertools.pairwise(trace.requests)]
    assert all(g >= 0 for g in gaps)
    assert sum(gaps) / len(gaps) == pytest.approx(1 / 50.0, rel=0.1)


def test_shapes_share_prefixes_as_designed() -> None:
    trace = generate(SMALL)
    by_kind: dict[str, list[TraceRequest]] = {}
    for request in trace.requests:
        by_kind.setdefault(request.kind, []).append(request)
    assert set(by_kind) == {"tenant", "session", "docqa", "cold"}
    tenants = [r for r in by_kind["tenant"] if r.group == by_kind["tenant"][0].group]
    assert len({r.messages[0]["content"] for r in tenants}) == 1
    assert len({r.messages[-1]["content"] for r in tenants}) == len(tenants)
    docs = [r for r in by_kind["docqa"] if r.group == by_kind["docqa"][0].group]
    document = docs[0].messages[1]["content"].split("Question:")[0]
    assert all(r.messages[1]["content"].startswith(document) for r in docs)
    colds = [r.messages[0]["content"] for r in by_kind["cold"]]
    assert len(set(colds)) == len(colds)


def test_session_turns_extend_the_previous_prompt() -> None:
    trace = generate(replace(SMALL, mix={"session": 1.0}, active_sessions=2))
    sessions: dict[str, list[TraceRequest]] = {}
    for request in trace.requests:
        sessions.setdefault(request.group, []).append(request)
    long_ones = [turns for turns in sessions.values() if len(turns) >= 3]
    assert long_ones
    for turns in long_ones:
        for before, after in itertools.pairwise(turns):
            assert after.messages[: len(before.messages)] == before.messages
            assert len(after.messages) == len(before.messages) + 2
            assert after.messages[len(before.messages)]["role"] == "assistant"


def test_output_lengths_are_bounded() -> None:
    trace = generate(replace(SMALL, requests=500))
    lengths = [r.max_tokens for r in trace.requests]
    assert min(lengths) >= 1 and max(lengths) <= SMALL.output_max
    assert 40 < percentile(lengths, 0.5) < 100


def test_trace_round_trip(tmp_path: Path) -> None:
    trace = generate(SMALL)
    save_trace(tmp_path / "t.jsonl", trace)
    loaded = load_trace(tmp_path / "t.jsonl")
    assert loaded.requests == trace.requests and loaded.spec["requests"] == 120
    (tmp_path / "bad.jsonl").write_text('{"trace": 99}\n')
    with pytest.raises(ValueError):
        load_trace(tmp_path / "bad.jsonl")


def test_request_body_asks_for_usage_in_the_stream() -> None:
    request = TraceRequest(0.0, "cold", "cold", ({"role": "user", "content": "x"},), 5)
    assert request.body("m")["stream_options"] == {"include_usage": True}
    assert "stream_options" not in request.body("m", stream=False)


def _shared(n: int, groups: int) -> list[TraceRequest]:
    system = [" ".join(f"group{g} word{i}" for i in range(200)) for g in range(groups)]
    return [TraceRequest(i * 0.1, "tenant", f"g{i % groups}",
                         ({"role": "system", "content": system[i % groups]},
                          {"role": "user", "content": f"question {i}"}), 8) for i in range(n)]


def test_oracle_keeps_groups_together_within_the_load_bound() -> None:
    preset = get_preset("gpu-8b")
    result = oracle(_shared(40, 4), workers=4, preset=preset, load_bound=1.1)
    assert result.imbalance <= 1.1
    # each group is cold once, then every request hits the group's system prompt
    single = oracle(_shared(40, 4)[:10], workers=1, preset=preset)
    assert result.hit_rate > 0.8 and single.hit_rate > 0.5


def test_oracle_load_bound_one_is_an_even_split() -> None:
    result = oracle(_shared(40, 1), workers=4, preset=get_preset("gpu-8b"), load_bound=1.0)
    assert result.per_worker == (10, 10, 10, 10)


def test_oracle_capacity_limits_hits() -> None:
    requests = _shared(60, 6)
    big = oracle(requests, 1, get_preset("gpu-8b"))
    tiny = oracle(requests, 1, get_preset("gpu-8b").with_overrides(num_blocks=60))
    assert tiny.hit_rate < big.hit_rate
    with pytest.raises(ValueError):
        oracle(requests, 0, get_preset("gpu-8b"))


METRICS = """# HELP vllm:prefix_cache_queries_total x
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 600.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 7.0
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 3.0
"""


def test_report_rows_and_table() -> None:
    stats = parse_worker_metrics(METRICS)
    assert stats == WorkerStats(1000.0, 600.0, 10.0)
    results = tuple(RequestResult("tenant", True, 200, 0.01 * (i + 1), 0.1, 100, 50, 10, None)
                    for i in range(10))
    failed = RequestResult("cold", False, 503, None, None, 0, 0, 0, None, "overloaded")
    row = policy_row("round-robin", ReplayResult(results + (failed,), 2.0),
                     [stats, WorkerStats(1000.0, 200.0, 30.0)])
    assert row.hit_rate == 0.4 and row.imbalance == 1.5 and row.errors == 1
    assert row.ttft_p50_ms == pytest.approx(55.0) and row.req_per_s == 5.0
    assert row.client_hit_rate == 0.5 and row.first_error == "overloaded"
    table = format_table([row])
    assert "round-robin" in table and "10/30" in table and "overloaded" in table
    assert '"policy": "round-robin"' in format_json([row])


def test_fit_line() -> None:
    a, b = fit_line([1, 2, 3, 4], [3.0, 5.0, 7.0, 9.0])
    assert (a, b) == pytest.approx((1.0, 2.0))


def test_percentile() -> None:
    assert percentile([1, 2, 3, 4, 5], 0.5) == 3
    assert percentile([1.0, 2.0], 0.99) == pytest.approx(1.99)
    assert percentile([], 0.5) != percentile([], 0.5)  # NaN


def test_profiles_are_specs() -> None:
    assert all(isinstance(p, WorkloadSpec) for p in PROFILES.values())
    assert isinstance(generate(PROFILES["calibration"]), Trace)
