"""The commands on recorded host facts: `kvgate up|workers up --kv-cache-dtype fp8` refused on an
AVX2-only CPU (exit 2, before any launch), `kvgate kv-check` there (exit 3), `kvgate plan --host`
and `kvgate workers status` showing the dtype in force and why."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import backends.host
from backends.cli import KV_CHECK_CANNOT_RUN
from backends.host import HostFacts, detect
from backends.workers.lifecycle import Phase, WorkerState
from backends.workers.state_file import StateFile
from backends.workers.status import WorkerStatus
from gateway.cli import main
from tests.support.fake_workers import worker_spec

FIXTURES = Path(__file__).parent / "fixtures"
EPYC = detect(FIXTURES / "cpuinfo-amd-epyc-avx2.txt")
SPR = detect(FIXTURES / "cpuinfo-intel-xeon-avx512-amx.txt")
REASON = "FP8 KV cache needs AVX-512 or AMX on CPU; this CPU has AVX2"


@pytest.fixture
def on_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("KVGATE_HOME", str(tmp_path))  # nothing prepared, no worker venv

    def use(facts: HostFacts) -> None:
        monkeypatch.setattr(backends.host, "detect", lambda *a, **k: facts)
    return use


@pytest.mark.parametrize("argv", [["up", "--port", "1"], ["workers", "up", "--device", "cpu"]], ids=["up", "workers-up"])
def test_explicit_fp8_on_avx2_exits_2_before_anything_starts(on_host, argv: list[str],  # type: ignore[no-untyped-def]
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    on_host(EPYC)
    started = time.monotonic()
    assert main([*argv, "--kv-cache-dtype", "fp8"]) == 2
    assert time.monotonic() - started < 1.0
    err = capsys.readouterr().err
    assert err.startswith(f"kvgate: --kv-cache-dtype fp8: {REASON}") and "Traceback" not in err


@pytest.mark.skipif(backends.host.kv_dtype_support(detect())["fp8"].ok, reason="this host can serve FP8 KV")
def test_the_real_command_refuses_fp8_in_under_a_second_on_this_host() -> None:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "up", "--kv-cache-dtype", "fp8"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "KVGATE_HOME": "/nonexistent"})
    print(f"refused in {time.monotonic() - started:.2f} s (interpreter start included)")
    assert done.returncode == 2 and "needs AVX-512 or AMX on CPU" in done.stderr


def test_kv_check_on_avx2_says_fp8_cannot_be_compared_and_exits_3(on_host,  # type: ignore[no-untyped-def]
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    on_host(EPYC)
    assert main(["kv-check", "--json"]) == KV_CHECK_CANNOT_RUN == 3
    out, err = capsys.readouterr()
    assert json.loads(out)["cannot_run"] is True
    assert f"fp8 KV cannot be compared on this host: {REASON}" in err
    assert main(["kv-check", "--candidate-dtype", "auto", "--limit", "0", "--urls", "http://127.0.0.1:1",
                 "http://127.0.0.1:1"]) != 3  # remote workers: not this host's business


def test_plan_host_on_avx2_shows_the_fallback_and_its_capacity(on_host,  # type: ignore[no-untyped-def]
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    on_host(EPYC)
    assert main(["plan", "--host", "smollm2-135m", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kv_cache_dtypes"]["fp8"] == {"ok": False, "reason": REASON}
    assert report["cpu_flags"] == ["avx", "avx2"]
    assert report["default"]["kv_cache_dtype"] == "auto" and report["default"]["dtype"] == "float32"
    assert (report["default"]["kv_tokens"], report["default"]["fp8_kv_tokens"]) == (23_296, 93_184)
    assert main(["plan", "--host", "smollm2-135m"]) == 0
    text = capsys.readouterr().out
    assert "kv fp8           no   " + REASON in text
    assert f"{REASON}: using float32 KV, 23,296 tokens instead of 93,184" in text


def test_plan_host_on_amx_defaults_to_fp8(on_host, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    on_host(SPR)
    assert main(["plan", "--host", "smollm2-135m", "--json"]) == 0
    default = json.loads(capsys.readouterr().out)["default"]
    assert (default["kv_cache_dtype"], default["dtype"], default["kv_tokens"]) == ("fp8", "auto", 93_184)


async def test_workers_status_shows_the_dtype_in_force_and_why(on_host, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    import dataclasses

    spec = dataclasses.replace(worker_spec(8001), kv_cache_dtype="auto", dtype="float32",
                               dtype_reason=f"{REASON}; float32 weights")
    state = StateFile(tmp_path / "workers" / "state.json", pid=os.getpid())
    await state.worker_changed(WorkerStatus.of("w0", spec, WorkerState(phase=Phase.READY), None, None, None,
                                               now=0.0, wall=0.0))
    assert main(["workers", "status"]) == 0
    assert f"w0: --kv-cache-dtype auto --dtype float32: {REASON}; float32 weights" in capsys.readouterr().out
    assert main(["workers", "status", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["workers"][0]
    assert (row["kv_cache_dtype"], row["dtype"], row["dtype_reason"]) == ("auto", "float32", f"{REASON}; float32 weights")


def test_up_reports_a_failed_worker_by_its_root_cause_and_log(on_host, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                              monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    import backends.workers.prepared
    from backends.workers.prepared import Runtime
    from tests.support.threads import free_port

    on_host(SPR)  # FP8 is the default here: the fake engine fails the way vLLM does without AVX-512
    python = tmp_path / "python"
    python.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.write(open({str(FIXTURES / 'vllm_cpu_startup_fp8_avx2.log')!r}).read())\n"
                      "sys.exit(1)\n")
    python.chmod(0o755)
    monkeypatch.setattr(backends.workers.prepared, "prepare_runtime", lambda **kw: Runtime(python, tmp_path / "model"))
    assert main(["up", "--port", str(free_port())]) == 1
    err = capsys.readouterr().err
    message = err[err.index("kvgate: worker local-0"):].splitlines()
    assert message[0] == ("kvgate: worker local-0: exited unexpectedly with code 1: "
                          "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX.")
    assert "in _get_attn_isa" in message[1] and message[-1] == f"(log: {tmp_path / 'logs' / 'local-0.log'})"
    assert "Traceback" not in err and "this CPU has AMX, which runs an FP8 KV cache (it needs AVX-512 or AMX): using fp8" in err


def test_workers_up_specs_carry_the_host_choice_and_refuse_a_file_asking_for_fp8(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from backends.workers.cli import _worker_specs

    model = tmp_path / "smol"
    model.mkdir()
    from backends.model_presets import PRESETS
    (model / "config.json").write_text(json.dumps(dict(PRESETS["smollm2-135m"].config)))
    args = argparse.Namespace(config=None, kv_cache_dtype=None, max_model_len=2048, enforce_eager=True,
                              tensor_parallel_size=1, count=2, first_port=8001, cpu_kvcache_space_gib=1, kv_events=None)
    specs = _worker_specs(args, str(model), "smollm2", EPYC, [])
    assert {(s.kv_cache_dtype, s.dtype) for _, s in specs} == {("auto", "float32")}
    assert specs[0][1].dtype_reason.startswith(REASON)
    assert f"{REASON}: using float32 KV, 23,296 tokens instead of 93,184" in capsys.readouterr().err
    assert {s.kv_cache_dtype for _, s in _worker_specs(args, str(model), "smollm2", SPR, [])} == {"fp8"}
    workers_file = tmp_path / "workers.toml"
    workers_file.write_text('[[workers]]\nkv_cache_dtype = "fp8"\n')
    args.config = str(workers_file)
    with pytest.raises(ValueError, match=f"^workers.worker-0.kv_cache_dtype fp8: {REASON}$"):
        _worker_specs(args, str(model), "smollm2", EPYC, [])
