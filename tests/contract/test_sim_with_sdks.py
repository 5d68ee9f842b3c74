"""The simulator's Responses, Messages and embeddings answers parse in the official SDKs.

``openai`` (a runtime dependency) and ``anthropic`` (skipped when not installed) talk straight to
one simulated worker, as they will to kvgate: ``responses.create`` (stream and not),
``responses.retrieve``, a ``previous_response_id`` chain, ``messages.create`` (stream and not),
``messages.count_tokens``, and ``embeddings.create`` on an ``embed`` worker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from openai import AsyncOpenAI, NotFoundError

from backends.sim.clock import ManualClock
from backends.sim.latency import LatencyModel
from backends.sim.presets import get_preset
from backends.sim.server import serve
from backends.sim.worker import SimConfig, SimWorker

PRESET = get_preset("vllm-cpu").with_overrides(latency=LatencyModel(0.0, 0.0, 0.0))


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def ports() -> AsyncIterator[tuple[int, int]]:
    workers = [SimWorker(SimConfig(model="smollm2", preset=PRESET), ManualClock()),
               SimWorker(SimConfig(model="embedder", preset=PRESET, task="embed"), ManualClock())]
    runners = await serve(workers, "127.0.0.1", 0)
    try:
        yield runners[0].addresses[0][1], runners[1].addresses[0][1]
    finally:
        for runner in runners:
            await runner.cleanup()


async def test_openai_responses(ports: tuple[int, int]) -> None:
    client = AsyncOpenAI(base_url=f"http://127.0.0.1:{ports[0]}/v1", api_key="none", max_retries=0)
    first = await client.responses.create(model="smollm2", input="Say hi", max_output_tokens=6, store=True)
    assert first.output_text and first.usage is not None and first.usage.output_tokens == 6
    assert (await client.responses.retrieve(first.id)).id == first.id
    second = await client.responses.create(model="smollm2", input="Again", previous_response_id=first.id,
                                           max_output_tokens=4)
    assert second.usage is not None and second.usage.input_tokens > first.usage.input_tokens
    kinds, text = [], []
    async with await client.responses.create(model="smollm2", input="Stream", max_output_tokens=5,
                                             stream=True) as stream:
        async for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                text.append(event.delta)
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed" and len(text) == 5
    with pytest.raises(NotFoundError):
        await client.responses.retrieve("resp_unknown")
    await client.close()


async def test_openai_embeddings(ports: tuple[int, int]) -> None:
    client = AsyncOpenAI(base_url=f"http://127.0.0.1:{ports[1]}/v1", api_key="none", max_retries=0)
    reply = await client.embeddings.create(model="embedder", input=["hello", "world"])
    assert len(reply.data) == 2 and len(reply.data[0].embedding) == 384 and reply.usage.prompt_tokens > 0
    packed = await client.embeddings.create(model="embedder", input="hello")  # the SDK asks for base64
    assert len(packed.data[0].embedding) == 384
    await client.close()


async def test_anthropic_messages(ports: tuple[int, int]) -> None:
    anthropic = pytest.importorskip("anthropic")
    client = anthropic.AsyncAnthropic(base_url=f"http://127.0.0.1:{ports[0]}", api_key="none", max_retries=0)
    messages = [{"role": "user", "content": "Say hi"}]
    reply = await client.messages.create(model="smollm2", max_tokens=6, messages=messages, system="Be brief.")
    assert reply.content[0].text and reply.usage.output_tokens == 6 and reply.stop_reason == "max_tokens"
    async with client.messages.stream(model="smollm2", max_tokens=4, messages=messages) as stream:
        text = [piece async for piece in stream.text_stream]
        final = await stream.get_final_message()
    assert len(text) == 4 and final.usage.output_tokens == 4
    counted = await client.messages.count_tokens(model="smollm2", messages=messages)
    assert counted.input_tokens > 0
    with pytest.raises(anthropic.NotFoundError):
        await client.messages.create(model="nope", max_tokens=4, messages=messages)
    await client.close()
