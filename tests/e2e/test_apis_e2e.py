"""Responses and Anthropic Messages on real vLLM-CPU workers, through kvgate, with the official SDKs.

The workers store Responses (``VLLM_ENABLE_RESPONSES_API_STORE=1``, set by
``WorkerProcess.for_spec``). Covered: ``responses.create`` (stream and not), ``responses.retrieve``,
a three-turn ``previous_response_id`` conversation over the two workers (every turn on the worker
holding the chain, also through a second kvgate app sharing Redis), ``messages.create`` (stream and
not) and ``messages.count_tokens``. Asserts on fields and routing, never on timings.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from gateway.app import create_app
from gateway.config import build_settings
from tests.support.local_workers import LocalWorkerPool
from tests.support.threads import ServerThread

pytestmark = pytest.mark.e2e


def _settings(pool: LocalWorkerPool, state: dict[str, Any] | None = None) -> Any:
    endpoints = [{"name": w.name, "url": w.base_url, "model": w.spec.served_model_name} for w in pool.workers]
    data: dict[str, Any] = {
        "clusters": {"fast": {"endpoints": endpoints}},
        "models": {"smollm2": {"cluster": "fast"}},
        "routing": {"policy": "round-robin"},
        "health": {"interval_s": 1.0},
    }
    if state is not None:
        data["state"] = state
    return build_settings(data)


@pytest.fixture(scope="module")
def gateways(vllm_workers: LocalWorkerPool) -> Iterator[list[str]]:
    state = {"backend": "redis", "redis_url": "redis://127.0.0.1:6379/0", "key_prefix": f"kvgate-e2e-{uuid.uuid4().hex[:8]}:"}
    threads = [ServerThread.uvicorn(create_app(_settings(vllm_workers, state))) for _ in range(2)]
    for thread in threads:
        thread.start()
    yield [f"http://127.0.0.1:{thread.port}" for thread in threads]
    for thread in threads:
        thread.stop()


def _client(origin: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=origin + "/v1", api_key="unused", max_retries=0, timeout=300)


def test_responses_create_stream_and_retrieve(gateways: list[str]) -> None:
    with _client(gateways[0]) as client:
        _responses(client)


def _responses(client: openai.OpenAI) -> None:
    first = client.responses.create(model="smollm2", input="What is the capital of France?", max_output_tokens=16,
                                    temperature=0)
    print(f"\n[e2e] responses.create: {first.id} {first.output_text!r} usage={first.usage}")
    assert "Paris" in first.output_text and first.usage is not None and first.usage.output_tokens > 0
    assert client.responses.retrieve(first.id).id == first.id
    kinds: list[str] = []
    with client.responses.create(model="smollm2", input="Say hi", max_output_tokens=8, stream=True) as stream:
        kinds = [event.type for event in stream]
    print(f"[e2e] responses stream events: {kinds[:3]} ... {kinds[-1]}")
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"


def test_three_turns_on_the_worker_holding_the_chain(gateways: list[str]) -> None:
    clients = [_client(origin) for origin in gateways]
    try:
        _chains(clients)
    finally:
        for client in clients:
            client.close()


def _chains(clients: list[openai.OpenAI]) -> None:
    chains = []
    for start in range(2):  # round-robin on the first app: the chains start on each worker once
        previous, endpoints = None, []
        for turn in range(3):
            client = clients[turn % 2]  # alternate the kvgate apps: the record is in Redis
            extra = {"previous_response_id": previous} if previous else {}
            raw = client.responses.with_raw_response.create(
                model="smollm2", input=f"Turn {turn}: name a colour.", max_output_tokens=8, **extra
            )
            previous = raw.parse().id
            endpoints.append(raw.headers["x-kvgate-endpoint"])
        print(f"[e2e] chain {start}: {endpoints}")
        assert len(set(endpoints)) == 1, endpoints
        chains.append(endpoints[0])
    assert len(set(chains)) == 2, chains  # over the two workers


def test_anthropic_messages(gateways: list[str]) -> None:
    anthropic = pytest.importorskip("anthropic")
    client = anthropic.Anthropic(base_url=gateways[0], api_key="unused", max_retries=0, timeout=300)
    try:
        _messages(client)
    finally:
        client.close()


def _messages(client: Any) -> None:
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    reply = client.messages.create(model="smollm2", max_tokens=16, messages=messages, extra_body={"temperature": 0})
    print(f"\n[e2e] messages.create: {reply.content[0].text!r} usage={reply.usage}")
    assert "Paris" in reply.content[0].text and reply.usage.output_tokens > 0
    with client.messages.stream(model="smollm2", max_tokens=8, messages=messages) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    print(f"[e2e] messages stream: {text!r} usage={final.usage}")
    assert text and final.usage.output_tokens > 0
    counted = client.messages.count_tokens(model="smollm2", messages=messages)
    print(f"[e2e] count_tokens: {counted.input_tokens}")
    assert counted.input_tokens > 0
