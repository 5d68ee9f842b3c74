"""Tests for backends.workers.local: spec building (pure) and the pool with a fake worker interpreter."""

from __future__ import annotations

import asyncio
import stat
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from backends.errors import WorkerStartError
from backends.workers.local import LocalWorkerPool, build_specs, free_ports, thread_binds
from backends.workers.prepared import Runtime

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


@pytest.mark.parametrize(("count", "cpus", "binds"), [
    (1, 2, ["0"]), (2, 2, ["0", "1"]), (2, 1, ["0", "0"]), (2, 16, ["0", "1"]), (1, 0, ["0"]),
])
def test_thread_binds(count: int, cpus: int, binds: list[str]) -> None:
    assert thread_binds(count, cpus) == binds


def test_build_specs_defaults_follow_the_cpu_recipe() -> None:
    a, b = build_specs(RUNTIME, [8001, 8002], binds=["0", "1"])
    assert (a.port, a.cpu_omp_threads_bind, b.port, b.cpu_omp_threads_bind) == (8001, "0", 8002, "1")
    assert a.model == "/models/smol" and a.served_model_name == "smollm2"
    assert (a.device, a.launcher, a.kv_cache_dtype, a.enforce_eager) == ("cpu", "module", "fp8", True)
    assert (a.max_model_len, a.cpu_kvcache_space_gib) == (2048, 1)
    assert a.enable_prefix_caching and a.enable_chunked_prefill and a.enable_prompt_tokens_details


def test_build_specs_overrides_apply_to_every_worker() -> None:
    specs = build_specs(RUNTIME, [1, 2], kv_cache_dtype="auto", binds=["0", "1"],
                        overrides={"max_num_seqs": 4, "block_size": 32})
    assert [(s.kv_cache_dtype, s.max_num_seqs, s.block_size) for s in specs] == [("auto", 4, 32)] * 2


@pytest.mark.parametrize(("kwargs", "error"), [
    (dict(overrides={"nope": 1}), "^overrides: unknown WorkerSpec field"),
    (dict(overrides={"kv_cache_dtype": "int8"}), "^kv_cache_dtype:"),
    (dict(binds=["0"]), "^binds:"),
])
def test_build_specs_errors(kwargs: dict, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        build_specs(RUNTIME, [1, 2], **kwargs)


def test_free_ports_are_distinct() -> None:
    ports = free_ports(3)
    assert len(set(ports)) == 3 and all(0 < p < 65536 for p in ports)


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
