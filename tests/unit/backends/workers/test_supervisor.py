"""WorkerSupervisor with fake processes and injected time: start, crash restart, crash loop, drain."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
import pytest_asyncio

from backends.errors import WorkerStartError
from backends.kv.report import ReportedCapacity
from backends.workers.lifecycle import Phase, RestartPolicy
from backends.workers.spec import WorkerSpec
from backends.workers.supervisor import UnknownWorkerError, WorkerSupervisor
from backends.workers.status import WorkerStatus
from tests.support.fake_workers import FakeRunner, FakeTime, Recorder

def spec(port: int) -> WorkerSpec:
    return WorkerSpec(model="/models/m", served_model_name="m", port=port, cpu_kvcache_space_gib=1)


async def probe(spec: WorkerSpec, log_path: Path | None) -> ReportedCapacity:
    return ReportedCapacity(93184, "metrics", 728, 128, "fp8", 45.5)


POLICY = RestartPolicy(backoff_initial_s=1.0, backoff_factor=2.0, backoff_max_s=30.0, crash_loop_limit=3,
                       crash_window_s=300.0)


def make(runner: FakeRunner, time: FakeTime, listeners: Sequence[object] = (), names: Sequence[str] = ("w0",),
         **kwargs: object) -> WorkerSupervisor:
    return WorkerSupervisor([(n, spec(8001 + i)) for i, n in enumerate(names)], runner, policy=POLICY,
                            listeners=listeners, clock=time.clock, wall_clock=lambda: 1_700_000_000.0,
                            sleep=time.sleep, planner=lambda s: None, capacity_probe=probe,
                            ready_timeout_s=5.0, **kwargs)  # type: ignore[arg-type]


@pytest_asyncio.fixture
async def stopper() -> AsyncIterator[list[WorkerSupervisor]]:
    started: list[WorkerSupervisor] = []
    yield started
    for sup in started:
        await sup.stop()


async def test_start_reaches_ready_with_reported_capacity(stopper: list[WorkerSupervisor]) -> None:
    recorder, time = Recorder(), FakeTime()
    sup = make(FakeRunner(), time, [recorder], names=("w0", "w1"))
    stopper.append(sup)
    await sup.start()
    await sup.wait_ready()
    assert recorder.phases("w0") == [Phase.LAUNCHING, Phase.WARMING, Phase.READY]
    status = sup.status("w1")
    assert (status.phase, status.generation, status.restarts, status.pid is not None) == (Phase.READY, 1, 0, True)
    assert status.to_dict()["kv_capacity"]["reported_tokens"] == 93184


async def test_crash_is_restarted_after_backoff_and_the_group_is_reaped(stopper: list[WorkerSupervisor]) -> None:
    runner, time, recorder = FakeRunner(), FakeTime(), Recorder()
    sup = make(runner, time, [recorder])
    stopper.append(sup)
    await sup.start()
    await sup.wait_ready()
    first = runner.created["w0"][0]
    first.exit(-9)  # SIGKILLed leader
    status = await sup.wait_for("w0", lambda s: s.phase is Phase.READY and s.generation == 2, 5.0)
    assert (status.restarts, status.last_exit_code) == (1, -9)
    assert first.stops >= 1, "the crashed worker's process group must be stopped (orphaned engine)"
    assert time.sleeps == [1.0]
    assert recorder.phases("w0")[2:] == [Phase.READY, Phase.FAILED, Phase.LAUNCHING, Phase.WARMING, Phase.READY]


async def test_a_crash_is_reported_at_once_but_relaunch_waits_for_the_old_group(
        stopper: list[WorkerSupervisor]) -> None:
    runner, time = FakeRunner(), FakeTime()
    sup = make(runner, time, orphan_grace_s=3.0)
    stopper.append(sup)
    await sup.start()
    await sup.wait_ready()
    first = runner.created["w0"][0]
    first.stop_gate = asyncio.Event()  # its orphaned engine takes a while to die
    first.exit(-9)
    await sup.wait_for("w0", lambda s: s.phase is Phase.FAILED, 5.0)  # reported before the group is gone
    await sup.wait_for("w0", lambda s: s.phase is Phase.LAUNCHING, 5.0)
    for _ in range(10):
        await asyncio.sleep(0)
    assert len(runner.created["w0"]) == 1, "relaunched while the old group was still alive"
    assert first.stop_timeouts == [3.0]  # orphans get the short grace
    first.stop_gate.set()
    await sup.wait_for("w0", lambda s: s.phase is Phase.READY, 5.0)
    assert len(runner.created["w0"]) == 2


async def test_crash_loop_gives_up_with_doubling_backoff(stopper: list[WorkerSupervisor]) -> None:
    time = FakeTime()
    sup = make(FakeRunner({"w0": ["crash"]}), time)
    stopper.append(sup)
    await sup.start()
    with pytest.raises(WorkerStartError, match="crash loop: 4 crashes"):
        await sup.wait_ready(fail_fast=False)
    status = sup.status("w0")
    assert status.gave_up and status.restarts == 3 and status.retry_in_s is None
    assert time.sleeps == [1.0, 2.0, 4.0]


async def test_fail_fast_reports_the_first_failure_with_its_log(stopper: list[WorkerSupervisor]) -> None:
    sup = make(FakeRunner({"w0": ["unstartable"]}), FakeTime())
    stopper.append(sup)
    await sup.start()
    with pytest.raises(WorkerStartError, match="could not start: w0: cannot start 'python'"):
        await sup.wait_ready()


async def test_restart_drains_before_stopping_then_relaunches(stopper: list[WorkerSupervisor]) -> None:
    runner, recorder = FakeRunner(), Recorder(hold_drain=True)
    sup = make(runner, FakeTime(block_from=30.0), [recorder])
    stopper.append(sup)
    await sup.start()
    await sup.wait_ready()
    sup.restart("w0")
    await sup.wait_for("w0", lambda s: s.phase is Phase.DRAINING, 5.0)
    for _ in range(5):
        await asyncio.sleep(0)
    assert recorder.drains == ["w0"] and runner.created["w0"][0].stops == 0, "stopped before the drain ended"
    recorder.release.set()
    status = await sup.wait_for("w0", lambda s: s.phase is Phase.READY and s.generation == 2, 5.0)
    assert (status.restarts, status.last_error, len(runner.created["w0"])) == (1, None, 2)
    assert recorder.phases("w0")[3:] == [Phase.DRAINING, Phase.STOPPING, Phase.LAUNCHING, Phase.WARMING, Phase.READY]


async def test_drain_is_bounded_by_the_drain_timeout(stopper: list[WorkerSupervisor]) -> None:
    time, recorder = FakeTime(), Recorder(hold_drain=True)  # the listener never finishes draining
    sup = make(FakeRunner(), time, [recorder], drain_timeout_s=30.0)
    stopper.append(sup)
    await sup.start()
    await sup.wait_ready()
    sup.drain("w0")
    status = await sup.wait_for("w0", lambda s: s.phase is Phase.STOPPED, 5.0)
    assert status.goal == "run" and 30.0 in time.sleeps


async def test_stop_drains_and_stops_everything() -> None:
    runner, recorder = FakeRunner(), Recorder()
    sup = make(runner, FakeTime(), [recorder], names=("w0", "w1"))
    await sup.start()
    await sup.wait_ready()
    await sup.stop()
    assert sorted(recorder.drains) == ["w0", "w1"]
    assert all(p.returncode is not None for ps in runner.created.values() for p in ps)
    assert [s.phase for s in sup.statuses()] == [Phase.STOPPED, Phase.STOPPED]
    await sup.stop()  # idempotent


async def test_stop_while_warming_kills_without_waiting_for_health() -> None:
    runner = FakeRunner({"w0": ["hang"]})
    sup = make(runner, FakeTime())
    await sup.start()
    await sup.wait_for("w0", lambda s: s.phase is Phase.WARMING, 5.0)
    await sup.stop()
    assert sup.status("w0").phase is Phase.STOPPED and runner.created["w0"][0].returncode == -15


async def test_subscribe_replays_and_a_failing_listener_is_only_logged(
        stopper: list[WorkerSupervisor], caplog: pytest.LogCaptureFixture) -> None:
    class Broken(Recorder):
        async def worker_changed(self, status: WorkerStatus) -> None:
            raise RuntimeError("listener bug")

    sup = make(FakeRunner(), FakeTime(), [Broken()])
    stopper.append(sup)
    await sup.start()
    await sup.wait_ready()
    late = Recorder()
    await sup.subscribe(late)
    assert late.seen == [("w0", Phase.READY)]
    assert "worker listener worker_changed failed" in caplog.text


async def test_unknown_worker_and_duplicate_names_are_refused() -> None:
    sup = make(FakeRunner(), FakeTime())
    with pytest.raises(UnknownWorkerError, match="no worker named 'nope'"):
        sup.restart("nope")
    with pytest.raises(ValueError, match="duplicate"):
        make(FakeRunner(), FakeTime(), names=("a", "a"))


async def test_a_crash_is_reported_by_the_root_cause_in_its_log(stopper: list[WorkerSupervisor]) -> None:
    fixture = Path(__file__).parents[1] / "fixtures" / "vllm_cpu_startup_fp8_avx2.log"

    class LoggingRunner(FakeRunner):
        def create(self, name: str, spec: WorkerSpec):  # type: ignore[no-untyped-def]
            process = super().create(name, spec)
            process.log_path = fixture
            return process

    sup = make(LoggingRunner({"w0": ["crash"]}), FakeTime())
    stopper.append(sup)
    await sup.start()
    with pytest.raises(WorkerStartError) as info:
        await sup.wait_ready()
    lines = str(info.value).splitlines()
    cause = "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX."
    assert lines[0] == f"worker w0: exited unexpectedly with code 1: {cause}"
    assert "in _get_attn_isa" in lines[1] and lines[-1] == f"(log: {fixture})"
    assert sup.status("w0").last_error == f"exited unexpectedly with code 1: {cause}"
