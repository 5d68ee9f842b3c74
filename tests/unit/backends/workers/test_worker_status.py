"""WorkerStatus views, the status table, the status file, and a worker's planned/reported capacity."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.kv.report import ReportedCapacity
from backends.workers.lifecycle import Phase, WorkerState
from backends.model_presets import PRESETS
from backends.workers.spec import WorkerSpec
from backends.workers.state_file import StateFile, read_state, supervisor_alive
from backends.workers.capacity import fetch_reported, plan_for_spec
from backends.workers.status import WorkerStatus, format_table
from tests.support.fake_vllm import fake_vllm_app
from tests.support.fake_workers import worker_spec
from tests.support.threads import ServerThread

FIXTURES = Path(__file__).parents[1] / "fixtures"


class _Proc:
    pid = 4242
    log_path = Path("/logs/w0.log")


def status(state: WorkerState, **kwargs: object) -> WorkerStatus:
    return WorkerStatus.of("w0", worker_spec(8001), state, _Proc(), kwargs.get("planned"),  # type: ignore[arg-type]
                           kwargs.get("reported"), now=100.0, wall=1_700_000_100.0)  # type: ignore[arg-type]


def test_status_times_pid_and_retry() -> None:
    s = status(WorkerState(phase=Phase.FAILED, since=90.0, retry_at=104.0, crashes=(90.0,)))
    d = s.to_dict()
    assert (d["since_unix"], d["retry_in_s"], d["pid"], d["gave_up"], d["log_path"]) == (1_700_000_090.0, 4.0, None, False, "/logs/w0.log")
    assert status(WorkerState(phase=Phase.READY)).pid == 4242


def test_table_rows() -> None:
    ready = status(WorkerState(phase=Phase.READY, restarts=1),
                   reported=ReportedCapacity(93_184, "metrics")).to_dict()
    ready["kv_capacity"]["planned_tokens"], ready["kv_capacity"]["relative_error"] = 93_184, 0.0
    failed = status(WorkerState(phase=Phase.FAILED, retry_at=None)).to_dict()
    lines = format_table([ready, failed]).splitlines()
    assert lines[0].split() == ["NAME", "PHASE", "PID", "URL", "KV", "RESTARTS", "KV", "TOKENS", "PLANNED", "REPORTED", "ERROR"]
    assert lines[1].split() == ["w0", "ready", "4242", "http://127.0.0.1:8001/v1", "fp8", "1", "93,184", "93,184", "0.0%"]
    assert "failed (gave up)" in lines[2]


async def test_state_file_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "workers" / "state.json"
    state = StateFile(path, pid=123, wall_clock=lambda: 5.0)
    await state.worker_changed(status(WorkerState(phase=Phase.WARMING)))
    await state.worker_changed(status(WorkerState(phase=Phase.READY)))
    document = read_state(path)
    assert document is not None
    assert (document["supervisor_pid"], document["updated_unix"]) == (123, 5.0)
    assert [w["phase"] for w in document["workers"]] == ["ready"]
    assert not list(path.parent.glob("*.tmp"))
    state.remove()
    assert read_state(path) is None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{broken")
    assert read_state(path) is None


def test_supervisor_alive() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not supervisor_alive({"supervisor_pid": child.pid})
    assert not supervisor_alive({"supervisor_pid": "x"})
    assert supervisor_alive({"supervisor_pid": os.getpid()})


def test_plan_for_spec_on_cpu(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(dict(PRESETS["smollm2-135m"].config)))
    spec = WorkerSpec(model=str(tmp_path), served_model_name="s", port=1, cpu_kvcache_space_gib=1, max_model_len=2048)
    planned = plan_for_spec(spec)
    assert planned is not None and (planned.kv_cache_tokens, planned.block_size) == (93_184, 128)
    gpu = WorkerSpec(model=str(tmp_path), served_model_name="s", port=1, device="gpu", block_size=32)
    assert plan_for_spec(gpu).kv_cache_tokens is None  # type: ignore[union-attr]
    assert plan_for_spec(gpu, gpu_memory_bytes=24 * 2**30).kv_cache_tokens > 0  # type: ignore[union-attr, operator]


def test_plan_for_spec_without_a_local_config_or_for_a_refused_model(tmp_path: Path) -> None:
    assert plan_for_spec(WorkerSpec(model="org/hub-id", served_model_name="s", port=1, cpu_kvcache_space_gib=1)) is None
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba"}))
    assert plan_for_spec(WorkerSpec(model=str(tmp_path), served_model_name="s", port=1, cpu_kvcache_space_gib=1)) is None


@pytest.fixture(scope="module")
def fake_worker() -> Iterator[str]:
    server = ServerThread.aiohttp(fake_vllm_app({}, cache_dtype="fp8", kv_tokens=93_184))
    server.start()
    yield f"http://127.0.0.1:{server.port}"
    server.stop()


async def test_fetch_reported_from_metrics_then_from_the_log(fake_worker: str) -> None:
    assert await fetch_reported(fake_worker) == ReportedCapacity(93_184, "metrics", 728, 128, "fp8", None)
    refused = "http://127.0.0.1:1"
    assert await fetch_reported(refused) is None
    from_log = await fetch_reported(refused, FIXTURES / "vllm_cpu_startup_auto.log")
    assert from_log == ReportedCapacity(46_592, "log", max_concurrency=22.75)
