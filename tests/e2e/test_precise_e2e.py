"""Precise mode on ONE real vLLM-CPU worker: its KV events reach the gateway's subscriber, and the
exact set predicts the ``cached_tokens`` vLLM reports for a repeated prompt.

The worker is started as ``kvgate up`` starts its workers with ``[routing.kv_events] enabled``
(``build_specs(kv_events=...)``: ``--kv-events-config`` connecting to the gateway's bind, topic =
the worker's origin); its ``/kv_event_sources`` must say so. One worker of its own (the shared
pool has no events), about 30-60 s to start.
"""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from backends.workers.dtypes import Chosen
from backends.workers.prepared import Runtime
from gateway.endpoints.model import Endpoint, EndpointSpec
from gateway.scheduling import kv_subscriber
from gateway.scheduling.kv_events import KvBlockSets
from gateway.scheduling.kv_subscriber import KvEventSubscriber, resolver
from gateway.scheduling.tokens import TokenizeClient, held, tokenize_body
from gateway.protocol.openai import Operation
from tests.e2e.conftest import START_TIMEOUT_S
from tests.support.local_workers import LocalWorkerPool

pytestmark = pytest.mark.e2e

SYSTEM = " ".join(f"Fact {i}: the depot keeps {i * 7} crates of item {i}." for i in range(60))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _until(condition, what: str, rounds: int = 600) -> None:  # noqa: ANN001
    for _ in range(rounds):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


async def test_events_arrive_and_the_set_predicts_cached_tokens(vllm_runtime: Runtime, host_dtypes: Chosen) -> None:
    bind = f"tcp://127.0.0.1:{free_port()}"
    sets = KvBlockSets()
    endpoints: list[Endpoint] = []
    subscriber = KvEventSubscriber(bind, sets, resolver(lambda: endpoints))
    task = await kv_subscriber.start(subscriber)
    assert task is not None
    tokenize = TokenizeClient()
    try:
        async with LocalWorkerPool(vllm_runtime, 1, kv_events=bind, healthy_timeout_s=START_TIMEOUT_S) as pool, \
                httpx.AsyncClient(timeout=120) as client:
            worker = pool.workers[0]
            endpoints.append(Endpoint(EndpointSpec("local-0", "fast", worker.base_url, "smollm2")))
            sources = (await client.get(f"{worker.origin}/kv_event_sources")).json()
            assert [s["topic"] for s in sources.values()] == [worker.origin]
            assert [s["endpoint"] for s in sources.values()] == [bind]
            messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "How many crates of item 3?"}]
            body = {"model": "smollm2", "messages": messages, "max_tokens": 2, "temperature": 0}
            first = (await client.post(f"{worker.base_url}/chat/completions", json=body)).json()["usage"]
            await _until(lambda: sets.size("local-0") > 0, "a BlockStored batch from the worker")
            tokens = await tokenize(f"{worker.origin}/tokenize", tokenize_body(body, Operation.CHAT, "smollm2"), 30)
            assert len(tokens) == first["prompt_tokens"]  # /tokenize renders the chat template as the engine did
            predicted = held(sets, "local-0", tokens)
            second = (await client.post(f"{worker.base_url}/chat/completions", json=body)).json()["usage"]
            assert predicted > 0
            assert second["prompt_tokens_details"]["cached_tokens"] == predicted
            print(f"\n[e2e] prompt {len(tokens)} tokens, predicted {predicted}, vLLM cached "
                  f"{second['prompt_tokens_details']['cached_tokens']}, batches {subscriber.batches}, "
                  f"blocks {sets.size('local-0')}, block size {sets.block_size('local-0')}")
    finally:
        await tokenize.aclose()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
