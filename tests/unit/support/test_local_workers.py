"""Tests for tests/support/local_workers.py: the e2e harness's pool, with a fake worker interpreter."""

from __future__ import annotations

import asyncio
import stat
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from backends.errors import WorkerStartError
from backends.workers.prepared import Runtime
from tests.support.local_workers import LocalWorkerPool

RUNTIME = Runtime(worker_python=Path("/w/bin/python"), model_dir=Path("/models/smol"))

# Stands in for the worker venv's python: serves /health on --port unless its bind is in FAIL_BINDS.
FAKE_PYTHON = textwrap.dedent("""\
    #!{python}
    import http.server, os, sys
    print("fake worker", " ".join(sys.argv[1:]), "bind", os.environ.get("VLLM_CPU_OMP_THREADS_BIND"), flush=True)
    if os.environ.get("VLLM_CPU_OMP_THREADS_BIND") in os.environ.get("FAIL_BINDS", "").split(","):
        sys.exit("engine failed")
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        def log_message(self, *args):
            pass
    port = int(sys.argv[sys.argv.index("--port") + 1])
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


@pytest.mark.parametrize("count", [0, 3])
def test_pool_count_is_1_or_2(count: int) -> None:
    with pytest.raises(ValueError, match="^count:"):
        LocalWorkerPool(RUNTIME, count)


@pytest.fixture
def fake_runtime(tmp_path: Path) -> Runtime:
    python = tmp_path / "python"
    python.write_text(FAKE_PYTHON.format(python=sys.executable))
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    return Runtime(worker_python=python, model_dir=tmp_path / "model")


async def test_pool_starts_and_stops_workers(fake_runtime: Runtime, tmp_path: Path) -> None:
    pool = LocalWorkerPool(fake_runtime, 2, log_dir=tmp_path / "logs", binds=["0", "1"], log=lambda line: None)
    async with pool:
        assert [w.name for w in pool.workers] == ["local-0", "local-1"]
        async with httpx.AsyncClient() as client:
            for worker in pool.workers:
                assert worker.base_url == f"http://127.0.0.1:{worker.spec.port}/v1"
                assert (await client.get(worker.origin + "/health")).status_code == 200
    assert all(w.process.returncode is not None for w in pool.workers)
    log = (tmp_path / "logs" / "local-1.log").read_text()
    assert "-m vllm.entrypoints.openai.api_server" in log and "bind 1" in log


async def test_pool_failure_stops_every_worker(fake_runtime: Runtime, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL_BINDS", "1")
    pool = LocalWorkerPool(fake_runtime, 2, log_dir=tmp_path / "logs", binds=["0", "1"],
                           healthy_timeout_s=30, log=lambda line: None)
    with pytest.raises(WorkerStartError, match="local-1 exited with code 1") as info:
        async with pool:
            pytest.fail("the pool should not start")
    assert "engine failed" in str(info.value)
    assert all(w.process.returncode is not None for w in pool.workers)


async def test_pool_cancelled_during_start_stops_every_worker(fake_runtime: Runtime, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAIL_BINDS", "")
    pool = LocalWorkerPool(fake_runtime, 1, log_dir=tmp_path / "logs", log=lambda line: None)

    async def enter() -> None:
        async with pool:
            await asyncio.sleep(600)

    task = asyncio.create_task(enter())
    while pool.workers[0].process.pid is None:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pool.workers[0].process.returncode is not None
