"""Two real vLLM-CPU workers under the supervisor (``auto`` and ``fp8`` KV), with kvgate in front.

On a host that cannot serve FP8 KV (no AVX-512 or AMX, ``backends.host``) the pair is two
``auto`` workers (``kv-auto``, ``kv-auto-1``); both run the model dtype chosen for the host.
One pair of workers (about 30-60 s to start) serves every test here, in order:

1. the planner's KV capacity is within 5 % of what each worker reports, for the dtype launched;
2. ``kv-check``'s side-by-side comparison runs on them (FP8 vs auto: skipped without FP8);
3. a worker's API server is SIGKILLed: the supervisor reaps its orphaned engine, restarts it
   with backoff, the gateway keeps answering from the other worker meanwhile and re-admits the
   restarted one once healthy;
4. an admin restart drains first: a request streaming through the gateway finishes.

The module sorts before the session-wide ``vllm_workers`` users, so its two workers are stopped
before that pool starts (at most two real workers at once on these 2-core machines).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
import uvicorn

from backends.evalset import load_eval
from backends.kv.check import compare, format_table
from backends.kv.planner import kv_storage_dtype
from backends.kv.check_run import Target, pair_specs, run_pair
from backends.workers.lifecycle import Phase, RestartPolicy
from backends.workers.process import pid_alive
from backends.workers.prepared import Runtime
from backends.workers.supervisor import VllmRunner, WorkerSupervisor
from backends.workers.dtypes import Chosen
from backends.workers.status import WorkerStatus
from gateway.api import admin_workers
from gateway.app import create_app
from gateway.endpoints.managed import ManagedEndpoints
from gateway.config import build_settings
from tests.e2e.conftest import START_TIMEOUT_S, fp8_skip_reason
from tests.support.threads import free_port

pytestmark = pytest.mark.e2e

ADMIN = {"Authorization": "Bearer e2e-admin"}
QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
NO_FP8 = fp8_skip_reason()
NAMES = ("kv-auto", "kv-auto-1") if NO_FP8 else ("kv-auto", "kv-fp8")
OTHER = NAMES[1]  # the worker the kill test kills
REPORTED_TOKENS = {"bfloat16": 46_592, "float32": 23_296, "fp8": 93_184}
"""KV tokens vllm-cpu 0.32 reports for SmolLM2 with VLLM_CPU_KVCACHE_SPACE=1, by stored dtype."""


class Seen:
    """A listener keeping every (worker, phase) the supervisor published, with the time."""

    def __init__(self) -> None:
        self.events: list[tuple[float, str, Phase]] = []

    async def worker_changed(self, status: WorkerStatus) -> None:
        self.events.append((time.monotonic(), status.name, status.phase))

    async def drain(self, status: WorkerStatus, timeout_s: float) -> None:
        """Routes nothing."""

    def phases(self, name: str, since: float = 0.0) -> list[Phase]:
        return [p for t, n, p in self.events if n == name and t >= since]

    def first(self, name: str, phase: Phase, since: float) -> float:
        return next(t for t, n, p in self.events if n == name and p is phase and t >= since)


@pytest.fixture(scope="module")
def seen() -> Seen:
    return Seen()


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def pair(vllm_runtime: Runtime, host_dtypes: Chosen, seen: Seen,
               tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[WorkerSupervisor]:
    """``kv-auto`` (core 0) and ``kv-fp8`` (core 1; ``kv-auto-1`` without FP8), ready; logs in a
    temporary directory; the model dtype is this host's choice for both."""
    specs = pair_specs(vllm_runtime, ("auto", "auto" if NO_FP8 else "fp8"), cpu_count=os.cpu_count() or 2,
                       names=NAMES, dtype=host_dtypes.choice.dtype, dtype_reason=host_dtypes.choice.reason)
    runner = VllmRunner(vllm_runtime.worker_python, tmp_path_factory.mktemp("worker-logs"))
    policy = RestartPolicy(backoff_initial_s=1.0, crash_loop_limit=3)
    async with WorkerSupervisor(specs, runner, policy=policy, listeners=[seen], drain_timeout_s=60.0,
                                healthy_timeout_s=START_TIMEOUT_S, ready_timeout_s=START_TIMEOUT_S) as supervisor:
        yield supervisor


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:  # leave pytest's signal handling alone
        yield


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def gateway(pair: WorkerSupervisor) -> AsyncIterator[str]:
    """kvgate in this event loop, its ``fast`` cluster fed by the supervisor (ManagedEndpoints)."""
    settings = build_settings({"clusters": {"fast": {"endpoints": []}},
                               "models": {"smollm2": {"cluster": "fast"}},
                               "health": {"interval_s": 1.0}, "admin": {"api_key": "e2e-admin"},
                               "routing": {"policy": "round-robin"}})  # availability, not routing, is tested
    app = create_app(settings)
    if not any(getattr(route, "path", "").startswith("/admin/workers") for route in app.routes):
        app.include_router(admin_workers.router)
    app.state.container.supervisor = pair
    await pair.subscribe(ManagedEndpoints.for_settings(app.state.container.registry, settings.health, settings.circuit, "fast"))
    port = free_port()
    server = _Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), task
        await asyncio.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    await task


async def chat(client: httpx.AsyncClient, url: str, max_tokens: int = 12) -> httpx.Response:
    return await client.post(f"{url}/v1/chat/completions", json={
        "model": "smollm2", "messages": QUESTION, "temperature": 0, "max_tokens": max_tokens})


def targets(pair: WorkerSupervisor) -> tuple[Target, Target]:
    auto, fp8 = pair.status("kv-auto"), pair.status("kv-fp8")
    return (Target("auto", auto.spec.origin, "smollm2", "auto"), Target("fp8", fp8.spec.origin, "smollm2", "fp8"))


@pytest.mark.parametrize("name", NAMES)
async def test_planned_kv_capacity_is_within_5_percent_of_reported(pair: WorkerSupervisor, name: str) -> None:
    status = pair.status(name)
    launched = status.spec.kv_cache_dtype  # what this host could run, not what we would have liked
    tokens = REPORTED_TOKENS[kv_storage_dtype(launched, status.spec.dtype or "bfloat16")]
    assert status.reported is not None and status.planned is not None
    assert (status.reported.source, status.reported.cache_dtype) == ("metrics", launched)
    capacity = status.kv_capacity()
    print(f"{name}: planned {capacity['planned_tokens']:,} vs reported {capacity['reported_tokens']:,} tokens "
          f"(error {capacity['relative_error']:.2%})")
    assert capacity["relative_error"] <= 0.05
    assert capacity["reported_tokens"] == tokens  # VLLM_CPU_KVCACHE_SPACE=1, SmolLM2, vllm-cpu 0.32


@pytest.mark.skipif(NO_FP8 is not None, reason=NO_FP8 or "")
async def test_kv_check_compares_the_two_workers(pair: WorkerSupervisor) -> None:
    baseline, candidate = await run_pair(*targets(pair), load_eval()[:20], max_tokens=24)
    result = compare(baseline, candidate, max_accuracy_drop=0.2)
    print("\n" + format_table(result))
    assert baseline.accuracy >= 0.7 and candidate.accuracy >= 0.6
    auto_tokens = REPORTED_TOKENS[kv_storage_dtype("auto", pair.status(NAMES[0]).spec.dtype or "bfloat16")]
    assert (baseline.kv_cache_tokens, candidate.kv_cache_tokens) == (auto_tokens, 93_184)
    assert result.verdict_agreement >= 0.7 and baseline.decode_tok_s and candidate.ttft_p50_s


async def test_killed_worker_is_restarted_while_the_gateway_serves_from_the_other(
        pair: WorkerSupervisor, gateway: str, seen: Seen) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        assert {(await chat(client, gateway)).headers["x-kvgate-endpoint"] for _ in range(4)} == set(NAMES)
        before = pair.status(OTHER)
        killed_at = time.monotonic()
        os.kill(before.pid, signal.SIGKILL)  # the API server only: its EngineCore is orphaned
        served: list[tuple[int, str]] = []
        while pair.status(OTHER).phase is not Phase.READY or pair.status(OTHER).generation == 1:
            response = await chat(client, gateway)
            served.append((response.status_code, response.headers.get("x-kvgate-endpoint", "")))
            assert time.monotonic() - killed_at < max(240, START_TIMEOUT_S), \
                f"not restarted in time: {seen.phases(OTHER, killed_at)}"
            # More than 1 s apart: after each step a vLLM worker busy-polls its shared-memory queue for
            # 1 s (shm_broadcast busy_loop_s), pinning its core, and vLLM-CPU places the restarted
            # kv-fp8's EngineCore on the other worker's core (0): requests closer together starve
            # that start-up for minutes on this 2-core machine (seen in CI: > 240 s).
            await asyncio.sleep(1.5)
        ready_at = time.monotonic()
        after = pair.status(OTHER)
        assert all(code == 200 for code, _ in served), served
        assert {endpoint for _, endpoint in served} == {"kv-auto"}  # nothing sent to the dead worker
        assert (after.restarts, after.generation, after.last_exit_code) == (1, 2, -signal.SIGKILL)
        assert not pid_alive(before.pid) and after.pid != before.pid
        assert seen.phases(OTHER, killed_at)[:4] == [Phase.FAILED, Phase.LAUNCHING, Phase.WARMING, Phase.READY]
        assert not any(pid_alive(int(p.name)) and _pgid(int(p.name)) == before.pid
                       for p in Path("/proc").iterdir() if p.name.isdigit()), "orphaned engine left running"
        marks = [(phase.value, seen.first(OTHER, phase, killed_at) - killed_at)
                 for phase in (Phase.FAILED, Phase.LAUNCHING, Phase.WARMING, Phase.READY)]
        print("\nafter the kill: " + ", ".join(f"{name} {t:.2f} s" for name, t in marks)
              + f"; {len(served)} requests served by kv-auto meanwhile (ready seen after {ready_at - killed_at:.1f} s)")
        endpoints = {(await chat(client, gateway)).headers["x-kvgate-endpoint"] for _ in range(4)}
        assert endpoints == set(NAMES)  # re-admitted
        rows = (await client.get(f"{gateway}/admin/workers", headers=ADMIN)).json()["data"]
        assert {r["name"]: (r["phase"], r["restarts"]) for r in rows} == {NAMES[0]: ("ready", 0), OTHER: ("ready", 1)}
        assert {r["name"]: (r["kv_cache_dtype"], r["dtype_reason"]) for r in rows} == {
            n: (pair.status(n).spec.kv_cache_dtype, pair.status(n).spec.dtype_reason) for n in NAMES}


async def test_admin_restart_drains_an_in_flight_stream_first(pair: WorkerSupervisor, gateway: str) -> None:
    async with httpx.AsyncClient(timeout=120) as client:
        body = {"model": "smollm2", "messages": [{"role": "user", "content": "Tell me a long story about a cat."}],
                "temperature": 0, "max_tokens": 160, "stream": True, "ignore_eos": True}
        async with client.stream("POST", f"{gateway}/v1/chat/completions", json=body) as stream:
            worker = stream.headers["x-kvgate-endpoint"]
            restarts = pair.status(worker).restarts
            restart = await client.post(f"{gateway}/admin/workers/{worker}/restart", headers=ADMIN)
            assert restart.status_code == 202
            await pair.wait_for(worker, lambda s: s.phase is Phase.DRAINING, 10)
            text = "".join([chunk async for chunk in stream.aiter_text()])
        assert stream.status_code == 200 and '"finish_reason":"length"' in text.replace(" ", "")
        assert "data: [DONE]" in text and '"error"' not in text
        status = await pair.wait_for(worker, lambda s: s.phase is Phase.READY and s.restarts == restarts + 1,
                                     max(240, START_TIMEOUT_S))
        assert status.last_error is None


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None
