"""The testbed's replay client and metrics scrape against simulated workers over loopback."""

from __future__ import annotations

from dataclasses import replace

from sim_support import MODEL, RunningSim

from bench.oracle import oracle
from bench.replay import replay, replay_sequential
from bench.report import parse_worker_metrics, policy_row
from bench.run import _scrape
from bench.workload import PROFILES, generate

TRACE = generate(replace(PROFILES["shared-prefix"], requests=40, rate=1000.0, system_words=150,
                         document_words=200, cold_words=(30, 60), output_median=8, output_max=16))


async def test_replay_measures_every_request_and_metrics_agree(sim: RunningSim) -> None:
    result = await replay(sim.origin + "/v1", MODEL, TRACE.requests)
    assert len(result.results) == 40 and all(r.ok for r in result.results)
    assert all(r.ttft is not None and r.e2e >= r.ttft for r in result.results)
    assert [r.completion_tokens for r in result.results] == [r.max_tokens for r in TRACE.requests]
    (stats,) = await _scrape([sim.origin])
    assert stats.requests == 40
    assert stats.hits == sum(r.cached_tokens for r in result.results) > 0
    assert stats.queries == sum(r.prompt_tokens for r in result.results)
    row = policy_row("direct", result, [stats])
    assert row.imbalance == 1.0 and row.errors == 0 and row.hit_rate == row.client_hit_rate


async def test_single_worker_matches_the_oracle_when_sequential(sim: RunningSim) -> None:
    """One worker, one request at a time: the sim's hits are exactly the oracle's."""
    result = await replay_sequential(sim.origin + "/v1", MODEL, TRACE.requests)
    stats = parse_worker_metrics((await sim.http.get("/metrics")).text)
    expected = oracle(TRACE.requests, 1, sim.worker.config.preset)
    assert all(r.ok for r in result.results)
    assert (stats.hits, stats.queries) == (expected.hits, expected.queries)


async def test_replay_reports_failures(sim: RunningSim) -> None:
    await sim.http.post("/admin/faults", json={"spec": "stream-error:tokens=1,count=1"})
    await sim.http.post("/admin/faults", json={"spec": "error:status=503,count=1"})
    result = await replay_sequential(sim.origin + "/v1", MODEL, TRACE.requests[:3])
    errors = [r.error for r in result.results]
    assert errors[0].startswith("in-band error") and "503" not in errors[0]
    assert result.results[1].status == 503 and result.results[2].ok
