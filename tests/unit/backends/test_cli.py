"""`kvgate plan`, `kvgate kv-check` (against loopback fake workers) and `kvgate workers status/logs`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backends.evalset import load_eval
from backends.workers.lifecycle import Phase, WorkerState
from backends.workers.state_file import StateFile, read_state
from backends.workers.status import WorkerStatus
from gateway.cli import main
from tests.support.fake_workers import worker_spec
from tests.support.fake_vllm import fake_vllm_app
from tests.support.threads import ServerThread


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_reproduces_the_worked_example(capsys: pytest.CaptureFixture[str]) -> None:
    fp16 = run_json(capsys, "plan", "llama-3-70b", "--kv-cache-dtype", "auto", "--max-model-len", "40000", "--json")
    fp8 = run_json(capsys, "plan", "llama-3-70b", "--kv-cache-dtype", "fp8", "--max-model-len", "40000", "--json")
    assert (fp16["bytes_per_token"], fp8["bytes_per_token"]) == (327_680, 163_840)
    assert round(fp16["context_bytes"] / 1e9, 1) == 13.1
    assert {"bytes_per_token", "kv_cache_tokens", "max_concurrent_sequences"} <= set(fp16)


@pytest.mark.parametrize(("dtype", "reported"), [("auto", 46_592), ("fp8", 93_184)])
def test_plan_cpu_capacity_within_5_percent_of_vllm(capsys: pytest.CaptureFixture[str], dtype: str, reported: int) -> None:
    result = run_json(capsys, "plan", "smollm2-135m", "--kv-cache-dtype", dtype, "--cpu-kvcache-space-gib", "1",
                      "--max-model-len", "2048", "--json")
    assert abs(result["kv_cache_tokens"] - reported) / reported <= 0.05


def test_plan_text_and_gpu_budget(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "llama-3-70b", "--gpu-memory-gib", "80", "--tensor-parallel-size", "4",
                 "--max-model-len", "8192"]) == 0
    out = capsys.readouterr().out
    assert "bytes per token  163,840 (40,960 per GPU, TP 4)" in out and "concurrent seqs" in out


def test_plan_refuses_an_unsupported_model_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mamba", "hidden_size": 768}))
    assert main(["plan", str(tmp_path)]) == 2
    assert "state-space or hybrid layers" in capsys.readouterr().err


@pytest.fixture(scope="module")
def fake_pair() -> Iterator[tuple[str, str]]:
    items = load_eval()
    right = {item.question: f"It is {item.answers[0]}." for item in items}
    worse = dict(right) | {item.question: "I am not sure." for item in items[:5]}  # 5 of 50 wrong: -10 points
    servers = [ServerThread.aiohttp(fake_vllm_app(right, cache_dtype="auto", kv_tokens=46_592)),
               ServerThread.aiohttp(fake_vllm_app(worse, cache_dtype="fp8", kv_tokens=93_184))]
    for server in servers:
        server.start()
    yield f"http://127.0.0.1:{servers[0].port}/v1", f"http://127.0.0.1:{servers[1].port}/v1"
    for server in servers:
        server.stop()


def test_kv_check_prints_the_table_and_fails_above_the_limit(fake_pair: tuple[str, str],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["kv-check", "--urls", *fake_pair]) == 1
    out = capsys.readouterr().out
    assert "accuracy              50/50 (100.0%)  45/50 (90.0%)" in out
    assert "KV capacity (tokens)  46,592          93,184 (2.00x)" in out
    assert "answer agreement: 45/50 same verdict (90.0%)" in out
    assert "FAIL: accuracy drop 10.0 points (max 5.0)" in out


def test_kv_check_passes_with_a_looser_limit_and_prints_json(fake_pair: tuple[str, str],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    result = run_json(capsys, "kv-check", "--urls", *fake_pair, "--max-accuracy-drop", "0.1", "--json")
    assert result["passed"] and result["candidate"]["kv_cache_dtype"] == "fp8"
    assert result["baseline"]["kv_cache_tokens"] == 46_592 and result["baseline"]["decode_tok_s"] > 0


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KVGATE_HOME", str(tmp_path))
    return tmp_path


def test_workers_status_without_workers_exits_1(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["workers", "status"]) == 1
    assert "no workers are running" in capsys.readouterr().err


async def test_workers_status_and_logs_read_the_state_file(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = home / "logs" / "w0.log"
    log.parent.mkdir(parents=True)
    log.write_text("line 1\nline 2\nline 3\n")
    state = StateFile(home / "workers" / "state.json", pid=os.getpid())
    status = WorkerStatus.of("w0", worker_spec(8001), WorkerState(phase=Phase.READY, restarts=2), None, None, None,
                             now=0.0, wall=0.0)
    await state.worker_changed(status)
    assert read_state(state.path)["workers"][0]["restarts"] == 2
    assert main(["workers", "status"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["NAME", "PHASE", "PID"] and "w0    ready" in out
    assert main(["workers", "logs", "w0", "-n", "2"]) == 0
    assert capsys.readouterr().out == "line 2\nline 3\n"
    assert main(["workers", "logs", "nope"]) == 1


def test_workers_down_stops_the_supervisor_process(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        StateFile(home / "workers" / "state.json", pid=child.pid).write()
        assert main(["workers", "down", "--timeout", "10"]) == 0  # SIGTERM ends the sleeper
        assert child.wait(5) == -15
        assert "drained and stopped" in capsys.readouterr().err
    finally:
        child.kill()
        child.wait()
