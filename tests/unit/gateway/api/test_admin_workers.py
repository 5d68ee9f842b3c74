"""/admin/workers over a real app (ASGI transport) and a real supervisor running fake processes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from fastapi import FastAPI

from backends.kv.geometry import geometry_from_config
from backends.kv.planner import KvPlan, cpu_budget, plan
from backends.kv.report import ReportedCapacity
from backends.workers.lifecycle import Phase
from backends.model_presets import PRESETS
from backends.workers.spec import WorkerSpec
from backends.workers.supervisor import WorkerSupervisor
from gateway.api import admin_workers
from gateway.app import create_app
from gateway.endpoints.managed import ManagedEndpoints
from gateway.config import build_settings
from tests.support.fake_workers import FakeRunner, FakeTime, worker_spec

ADMIN = {"Authorization": "Bearer admin-secret"}


def smollm2_plan(spec: WorkerSpec) -> KvPlan:
    geometry = geometry_from_config(PRESETS["smollm2-135m"].config, "smollm2")
    return plan(geometry, kv_cache_dtype=spec.kv_cache_dtype, max_model_len=2048, budget=cpu_budget(1), block_size=128)


async def reported(spec: WorkerSpec, log_path: Path | None) -> ReportedCapacity:
    return ReportedCapacity(93184, "metrics", 728, 128, "fp8", 45.5)


def make_app(with_router: bool = True) -> FastAPI:
    settings = build_settings({"admin": {"api_key": "admin-secret"}, "clusters": {"fast": {"endpoints": []}}})
    app = create_app(settings, health_checks=False)
    if with_router and not any(getattr(r, "path", "").startswith("/admin/workers") for r in app.routes):
        app.include_router(admin_workers.router)
    return app


@pytest_asyncio.fixture
async def running() -> AsyncIterator[tuple[httpx.AsyncClient, WorkerSupervisor, FakeRunner]]:
    app, runner, time = make_app(), FakeRunner(), FakeTime()
    container = app.state.container
    sup = WorkerSupervisor([("w0", worker_spec(8001)), ("w1", worker_spec(8002))], runner, clock=time.clock,
                           sleep=time.sleep, planner=smollm2_plan, capacity_probe=reported)
    await sup.subscribe(ManagedEndpoints(container.registry, "fast", sleep=time.sleep, clock=time.clock))
    container.supervisor = sup
    await sup.start()
    await sup.wait_ready(5.0)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        yield client, sup, runner
    await sup.stop()


async def test_list_shows_phase_capacity_and_endpoint(running: tuple[httpx.AsyncClient, WorkerSupervisor, FakeRunner]) -> None:
    client, _, _ = running
    response = await client.get("/admin/workers", headers=ADMIN)
    assert response.status_code == 200
    rows = {row["name"]: row for row in response.json()["data"]}
    assert set(rows) == {"w0", "w1"}
    w0 = rows["w0"]
    assert (w0["phase"], w0["restarts"], w0["url"], w0["kv_cache_dtype"]) == ("ready", 0, "http://127.0.0.1:8001/v1", "fp8")
    assert w0["kv_capacity"]["planned_tokens"] == 93184 and w0["kv_capacity"]["reported_tokens"] == 93184
    assert w0["kv_capacity"]["relative_error"] == 0.0
    assert w0["endpoint"] == {"cluster": "fast", "health": "healthy", "draining": False, "in_flight": 0}


async def test_restart_is_accepted_and_relaunches(running: tuple[httpx.AsyncClient, WorkerSupervisor, FakeRunner]) -> None:
    client, sup, runner = running
    response = await client.post("/admin/workers/w1/restart", headers=ADMIN)
    assert response.status_code == 202 and response.json()["name"] == "w1"
    status = await sup.wait_for("w1", lambda s: s.phase is Phase.READY and s.generation == 2, 5.0)
    assert status.restarts == 1 and len(runner.created["w1"]) == 2
    row = (await client.get("/admin/workers/w1", headers=ADMIN)).json()
    assert (row["phase"], row["restarts"], row["endpoint"]["health"]) == ("ready", 1, "healthy")


async def test_drain_stops_and_start_brings_back(running: tuple[httpx.AsyncClient, WorkerSupervisor, FakeRunner]) -> None:
    client, sup, _ = running
    assert (await client.post("/admin/workers/w0/drain", headers=ADMIN)).status_code == 202
    await sup.wait_for("w0", lambda s: s.phase is Phase.STOPPED, 5.0)
    row = (await client.get("/admin/workers/w0", headers=ADMIN)).json()
    assert (row["phase"], row["endpoint"]) == ("stopped", None)
    assert (await client.post("/admin/workers/w0/start", headers=ADMIN)).status_code == 202
    await sup.wait_for("w0", lambda s: s.phase is Phase.READY, 5.0)


@pytest.mark.parametrize(("method", "path"), [("GET", "/admin/workers/nope"), ("POST", "/admin/workers/nope/restart"),
                                              ("POST", "/admin/workers/nope/drain")])
async def test_unknown_worker_is_404(running: tuple[httpx.AsyncClient, WorkerSupervisor, FakeRunner],
                                     method: str, path: str) -> None:
    client, _, _ = running
    response = await client.request(method, path, headers=ADMIN)
    assert response.status_code == 404 and "nope" in response.json()["error"]["message"]


async def test_wrong_key_is_401_and_no_supervisor_is_404() -> None:
    app = make_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as client:
        assert (await client.get("/admin/workers", headers={"Authorization": "Bearer wrong"})).status_code == 401
        response = await client.get("/admin/workers", headers=ADMIN)
    assert response.status_code == 404 and "no worker supervisor" in response.json()["error"]["message"]


async def test_log_tail_gives_the_last_lines_of_the_workers_log(
    running: tuple[httpx.AsyncClient, WorkerSupervisor, FakeRunner], tmp_path: Path
) -> None:
    client, _, runner = running
    log = tmp_path / "w0.log"
    log.write_text("".join(f"line {i}\n" for i in range(300)) + "ERROR engine died: out of memory\n")
    runner.created["w0"][-1].log_path = log
    body = (await client.get("/admin/workers/w0/log", params={"lines": 3}, headers=ADMIN)).json()
    assert body == {"name": "w0", "path": str(log), "lines": ["line 298", "line 299", "ERROR engine died: out of memory"]}
    assert len((await client.get("/admin/workers/w0/log", headers=ADMIN)).json()["lines"]) == 50  # the default
    log.write_bytes(b"x" * 200_000 + b"\nlast\n")  # only the file's last 64 KiB are read
    lines = (await client.get("/admin/workers/w0/log", params={"lines": 500}, headers=ADMIN)).json()["lines"]
    assert lines[-1] == "last" and sum(len(line) for line in lines) <= 64 * 1024
    missing = (await client.get("/admin/workers/w1/log", headers=ADMIN)).json()
    assert missing["lines"] == [] and missing["path"].endswith("w1.log")  # no such file yet
    for bad in (0, 501):
        assert (await client.get("/admin/workers/w0/log", params={"lines": bad}, headers=ADMIN)).status_code == 400
    assert (await client.get("/admin/workers/nope/log", headers=ADMIN)).status_code == 404
    assert (await client.get("/admin/workers/w0/log")).status_code == 401
