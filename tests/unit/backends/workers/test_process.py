"""Tests for backends.workers.process with dummy children (no vLLM): group stop, SIGKILL, health waits."""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from backends.errors import WorkerStartError
from backends.workers.process import WorkerProcess, tail_lines
from tests.support.loopback import free_port

# A child that starts a grandchild (same process group), records both pids, then waits.
# IGNORE_TERM=1 makes both ignore SIGTERM.
FAMILY = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    if os.environ.get("IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    grandchild = subprocess.Popen([sys.executable, "-c",
        "import os, signal, time\\n"
        "if os.environ.get('IGNORE_TERM') == '1': signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
        "time.sleep(600)"])
    with open(sys.argv[1] + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {grandchild.pid}")
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    print("family ready", flush=True)
    time.sleep(600)
""")

# A child serving GET /health -> 200 on the port given as argv[1].
HEALTHY = textwrap.dedent("""
    import http.server, sys
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 404)
            self.send_header("Content-Length", "0")
            self.end_headers()
        def log_message(self, *args):
            pass
    http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
""")


def _alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X")


def _worker(tmp_path: Path, script: str, *args: str, env: dict[str, str] | None = None,
            port: int = 9) -> WorkerProcess:
    return WorkerProcess([sys.executable, "-c", script, *args], env={**os.environ, **(env or {})},
                         log_path=tmp_path / "logs" / "w.log",
                         health_url=f"http://127.0.0.1:{port}/health", name="dummy")


async def _family_pids(pid_file: Path) -> list[int]:
    for _ in range(400):
        if pid_file.exists():
            return [int(p) for p in pid_file.read_text().split()]
        await asyncio.sleep(0.025)
    raise AssertionError("dummy child never wrote its pids")


@pytest.mark.parametrize("ignore_term", [False, True], ids=["sigterm", "ignores-sigterm"])
async def test_stop_ends_the_whole_process_group(tmp_path: Path, ignore_term: bool) -> None:
    pid_file = tmp_path / "pids"
    worker = _worker(tmp_path, FAMILY, str(pid_file), env={"IGNORE_TERM": "1" if ignore_term else "0"})
    await worker.start()
    pids = await _family_pids(pid_file)
    assert pids[0] == worker.pid and all(_alive(p) for p in pids)
    assert os.getpgid(pids[1]) == worker.pid != os.getpgid(0)

    started = time.monotonic()
    code = await worker.stop(timeout_s=0.5)
    elapsed = time.monotonic() - started

    assert not any(_alive(p) for p in pids)
    if ignore_term:
        assert code == -9 and elapsed >= 0.5
    else:
        assert code == -15 and elapsed < 5
    assert await worker.stop() == code  # idempotent
    assert "family ready" in worker.log_tail()


async def test_stop_sync_ends_the_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids"
    worker = _worker(tmp_path, FAMILY, str(pid_file), env={"IGNORE_TERM": "1"})
    await worker.start()
    pids = await _family_pids(pid_file)
    worker.stop_sync(timeout_s=0.2)
    assert not any(_alive(p) for p in pids)
    assert await worker.stop() == -9


async def test_stop_before_start_is_a_no_op(tmp_path: Path) -> None:
    assert await _worker(tmp_path, "pass").stop() is None


async def test_wait_healthy_returns_when_health_answers_200(tmp_path: Path) -> None:
    port = free_port()
    worker = _worker(tmp_path, HEALTHY, str(port), port=port)
    await worker.start()
    try:
        await worker.wait_healthy(timeout_s=20, poll_interval_s=0.05)
    finally:
        await worker.stop()


async def test_wait_healthy_raises_with_log_tail_when_the_child_exits(tmp_path: Path) -> None:
    script = "import sys\nfor i in range(100): print('line', i)\nsys.exit(3)"
    worker = _worker(tmp_path, script)
    await worker.start()
    with pytest.raises(WorkerStartError, match="exited with code 3") as info:
        await worker.wait_healthy(timeout_s=20, poll_interval_s=0.05)
    message = str(info.value)
    assert "line 99" in message and "line 60" in message and "line 59\n" not in message
    await worker.stop()


async def test_wait_healthy_times_out(tmp_path: Path) -> None:
    worker = _worker(tmp_path, "import time; time.sleep(600)", port=free_port())
    await worker.start()
    try:
        with pytest.raises(WorkerStartError, match="not healthy .* after 0.3 s"):
            await worker.wait_healthy(timeout_s=0.3, poll_interval_s=0.05)
    finally:
        await worker.stop()


async def test_start_failure_is_a_worker_start_error(tmp_path: Path) -> None:
    worker = WorkerProcess([str(tmp_path / "missing")], env={}, log_path=tmp_path / "w.log",
                           health_url="http://127.0.0.1:9/health")
    with pytest.raises(WorkerStartError, match="cannot start"):
        await worker.start()


def test_tail_lines(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("".join(f"{i}\n" for i in range(50)))
    assert tail_lines(log, 3) == "47\n48\n49"
    assert tail_lines(tmp_path / "absent.log", 3) == ""
