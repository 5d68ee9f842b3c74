"""A worker whose /health says 200 while its engine is stuck is taken out of rotation.

Two simulated workers; ``sim-1`` gets the simulator's worker-wide ``stuck`` fault (the engine
stops stepping, ``/health`` keeps answering 200). Requests that landed there stay running with no
new tokens; after ``health.stall_s`` kvgate marks it stalled and sends new requests to ``sim-0``
only. When the fault is cleared and tokens flow again, ``sim-1`` is re-admitted.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench import procs
from gateway.app import create_app
from gateway.config import build_settings
from tests.support.threads import ServerThread, wait_until


@pytest.fixture
def sims(tmp_path: Path) -> Iterator[list[int]]:
    base = procs.free_port_block(2)
    children = [
        procs.start(f"sim-{i}", procs.sim_command(base + i, 1, "instant", "m", i, ["--latency", "0.005,0,0.0005"]), tmp_path)
        for i in range(2)
    ]
    try:
        for i, child in enumerate(children):
            asyncio.run(procs.wait_ready(f"http://127.0.0.1:{base + i}/health", child))
        yield [base, base + 1]
    finally:
        for child in children:
            child.stop()


def test_stuck_engine_is_stalled_then_readmitted(sims: list[int]) -> None:
    settings = build_settings(
        {
            "health": {"interval_s": 0.2, "stall_s": 1.0},
            "routing": {"scrape": {"interval_s": 0.2}},  # the default profile scrapes engine metrics
            "upstream": {"timeouts": {"idle_s": 30, "first_byte_s": 30, "total_s": 30}},
            "clusters": {"c": {"endpoints": [{"name": f"sim-{i}", "url": f"http://127.0.0.1:{port}/v1", "model": "m"}
                                             for i, port in enumerate(sims)]}},
            "models": {"m": {"cluster": "c"}},
        }
    )
    app = create_app(settings)
    thread = ServerThread.uvicorn(app)
    thread.start()
    base = f"http://127.0.0.1:{thread.port}"
    stuck = app.state.container.registry.find("sim-1")
    pool = ThreadPoolExecutor(4)
    try:
        httpx.post(f"http://127.0.0.1:{sims[1]}/admin/faults", json={"spec": "stuck"}).raise_for_status()
        # Requests that land on sim-1 hang there: running, no new tokens.
        background = [
            pool.submit(httpx.post, f"{base}/v1/chat/completions",
                        json={"model": "m", "messages": [{"role": "user", "content": f"background {i}"}], "max_tokens": 5}, timeout=60)
            for i in range(4)
        ]
        assert wait_until(lambda: stuck.in_flight > 0, timeout_s=10), "no request reached sim-1"
        assert wait_until(lambda: stuck.stalled, timeout_s=15), "sim-1 was never judged stalled"
        served = {httpx.post(f"{base}/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "y"}],
                                                              "max_tokens": 3}, timeout=10).headers["x-kvgate-endpoint"] for _ in range(4)}
        assert served == {"sim-0"}
        httpx.delete(f"http://127.0.0.1:{sims[1]}/admin/faults").raise_for_status()
        assert wait_until(lambda: not stuck.stalled, timeout_s=15), "sim-1 was not re-admitted after it moved again"
        assert all(future.result(timeout=30).status_code == 200 for future in background)  # the stuck ones finished
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        thread.stop()
