"""The simulator's Responses, Messages and embeddings endpoints (behaviour beyond the shapes the
contract tests compare): store on/off, the chain of previous_response_id, faults, embed task."""

from __future__ import annotations

import base64
import json
import math
import struct
from collections.abc import AsyncIterator

import httpx
import pytest_asyncio

from backends.sim.clock import ManualClock
from backends.sim.faults import FAULT_HEADER
from backends.sim.latency import LatencyModel
from backends.sim.presets import get_preset
from backends.sim.server import serve
from backends.sim.worker import SimConfig, SimWorker
from gateway.protocol.messages import MessagesStreamObserver
from gateway.protocol.responses import ResponsesStreamObserver

PRESET = get_preset("vllm-cpu").with_overrides(latency=LatencyModel(0.0, 0.0, 0.0))


@pytest_asyncio.fixture(loop_scope="session")
async def clients() -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    configs = {
        "store": SimConfig(model="m", preset=PRESET),
        "nostore": SimConfig(model="m", preset=PRESET, responses_store=False),
        "embed": SimConfig(model="e", preset=PRESET, task="embed", embedding_dim=16),
    }
    runners = await serve([SimWorker(c, ManualClock()) for c in configs.values()], "127.0.0.1", 0)
    out = {}
    try:
        for name, runner in zip(configs, runners, strict=True):
            port = runner.addresses[0][1]
            out[name] = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10)
        yield out
    finally:
        for client in out.values():
            await client.aclose()
        for runner in runners:
            await runner.cleanup()


async def test_store_off_forgets_responses(clients: dict[str, httpx.AsyncClient]) -> None:
    client = clients["nostore"]
    created = (await client.post("/v1/responses", json={"model": "m", "input": "hi", "max_output_tokens": 2})).json()
    reply = await client.get(f"/v1/responses/{created['id']}")
    assert reply.status_code == 404 and reply.json()["error"]["param"] == "response_id"
    assert (await client.post(f"/v1/responses/{created['id']}/cancel")).status_code == 404


async def test_store_false_is_not_kept_and_the_chain_grows(clients: dict[str, httpx.AsyncClient]) -> None:
    client = clients["store"]
    unstored = (await client.post("/v1/responses", json={"model": "m", "input": "hi", "store": False,
                                                         "max_output_tokens": 2})).json()
    assert (await client.get(f"/v1/responses/{unstored['id']}")).status_code == 404
    turn, inputs = None, []
    for text in ("one", "two", "three"):
        body = {"model": "m", "input": text, "max_output_tokens": 3}
        if turn is not None:
            body["previous_response_id"] = turn["id"]
        turn = (await client.post("/v1/responses", json=body)).json()
        inputs.append(turn["usage"]["input_tokens"])
    assert inputs[0] < inputs[1] < inputs[2]


async def test_responses_stream_error_fault_ends_with_an_error_event(clients: dict[str, httpx.AsyncClient]) -> None:
    reply = await clients["store"].post("/v1/responses", json={"model": "m", "input": "hi", "stream": True,
                                                               "max_output_tokens": 6},
                                        headers={FAULT_HEADER: "stream-error:tokens=2"})
    observer = ResponsesStreamObserver(lambda: 0.0)
    observer.feed(reply.content)
    assert observer.output_events == 2 and observer.error is not None and not observer.done
    assert "response.completed" not in reply.text


async def test_pre_header_fault_on_messages_has_the_status(clients: dict[str, httpx.AsyncClient]) -> None:
    reply = await clients["store"].post("/v1/messages", json={"model": "m", "max_tokens": 3,
                                                              "messages": [{"role": "user", "content": "hi"}]},
                                        headers={FAULT_HEADER: "error:status=503"})
    assert reply.status_code == 503


async def test_messages_stream_usage_and_system_blocks(clients: dict[str, httpx.AsyncClient]) -> None:
    body = {"model": "m", "max_tokens": 4, "stream": True, "system": [{"type": "text", "text": "Be brief."}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    reply = await clients["store"].post("/v1/messages", json=body)
    observer = MessagesStreamObserver(lambda: 0.0)
    observer.feed(reply.content)
    assert observer.done and observer.tokens is not None and observer.tokens.output == 4
    count = (await clients["store"].post("/v1/messages/count_tokens", json={**body, "stream": False})).json()
    assert observer.tokens.input == count["input_tokens"]
    error = await clients["store"].post("/v1/messages", json={"model": "m", "max_tokens": 3, "messages": []})
    assert error.status_code == 400 and error.json()["type"] == "error"


async def test_embed_worker(clients: dict[str, httpx.AsyncClient]) -> None:
    client = clients["embed"]
    body = (await client.post("/v1/embeddings", json={"model": "e", "input": ["hello world", "hello world"]})).json()
    first, second = (item["embedding"] for item in body["data"])
    assert first == second and len(first) == 16 and math.isclose(sum(v * v for v in first), 1.0, rel_tol=1e-4)
    assert body["usage"]["prompt_tokens"] > 0 and body["usage"]["completion_tokens"] == 0
    packed = (await client.post("/v1/embeddings", json={"model": "e", "input": "hello world",
                                                        "encoding_format": "base64"})).json()
    values = struct.unpack("<16f", base64.b64decode(packed["data"][0]["embedding"]))
    assert len(values) == 16
    dims = await client.post("/v1/embeddings", json={"model": "e", "input": "x", "dimensions": 8})
    assert dims.status_code == 400 and "Matryoshka" in dims.json()["error"]["message"]  # as vLLM for SmolLM2
    score = (await client.post("/v1/score", json={"model": "e", "text_1": "hello world", "text_2": "hello world"})).json()
    assert math.isclose(score["data"][0]["score"], 1.0, rel_tol=1e-4) and score["usage"]["prompt_tokens"] > 0
    rerank = (await client.post("/v1/rerank", json={"model": "e", "query": "hello world",
                                                    "documents": ["bye", "hello world"]})).json()
    assert [r["index"] for r in rerank["results"]] == [1, 0] and rerank["usage"]["total_tokens"] > 0
    assert (await clients["store"].post("/v1/rerank", json={"model": "m", "query": "q", "documents": ["d"]})
            ).status_code == 404
    assert (await client.post("/v1/chat/completions", json={"model": "e"})).json() == {"detail": "Not Found"}
    assert (await clients["store"].post("/v1/embeddings", json={"model": "m", "input": "x"})).status_code == 404
    assert json.loads((await client.get("/v1/models")).text)["data"][0]["id"] == "e"


def test_cli_task_and_store_options() -> None:
    import argparse

    from backends.sim.cli import add_arguments, build_configs

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    (config,) = build_configs(parser.parse_args(["--task", "embed", "--embedding-dim", "32", "--no-responses-store"]))
    assert (config.task, config.embedding_dim, config.responses_store) == ("embed", 32, False)
    (default,) = build_configs(parser.parse_args([]))
    assert (default.task, default.responses_store) == ("generate", True)
