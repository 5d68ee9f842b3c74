"""JSON bodies and stream events of the simulated worker's Responses, Messages and embeddings APIs.

Field for field as vLLM 0.32 writes them (recorded in ``tests/contract/data/vllm_cpu_apis/``
and checked by ``tests/contract/test_sim_vs_recorded_vllm.py``):

- **Responses**: a ``response`` object with every optional field present (``null`` when unset);
  ``status`` is ``completed``, or ``incomplete`` with ``incomplete_details.reason =
  "max_output_tokens"`` when the output hit the limit. A stream is ``event: response.X`` +
  ``data`` carrying ``type`` and a ``sequence_number`` from 0: ``created``, ``in_progress``,
  ``output_item.added``, ``content_part.added``, one ``output_text.delta`` per token,
  ``output_text.done``, ``content_part.done``, ``output_item.done``, ``completed`` (with usage).
  No ``[DONE]``.
- **Messages** (Anthropic): ``{"id", "type": "message", "role", "content": [text block],
  "model", "stop_reason", "usage"}`` with vLLM's usage split (``input_tokens`` = prompt minus
  cache reads minus cache creation). A stream: ``message_start``, ``content_block_start``,
  ``content_block_delta`` per token, ``content_block_stop``, ``message_delta`` (stop reason and
  full usage), ``message_stop``. Errors: ``{"type": "error", "error": {"type", "message"}}``.
- **Embeddings**: ``{"id": "embd-...", "object": "list", "created", "model", "data":
  [{"index", "object": "embedding", "embedding"}], "usage"}``; usage carries
  ``completion_tokens: 0`` and null ``prompt_tokens_details`` / ``completion_tokens_details``.
- **Score** (``/v1/score``, a bi-encoder: the cosine of the two embeddings): ``{"id": "score-...",
  "object": "list", "created", "model", "data": [{"index", "object": "score", "score"}], "usage"}``;
  **rerank** (``/v1/rerank``): ``{"id": "score-...", "model", "usage": {"prompt_tokens",
  "total_tokens"}, "results": [{"index", "document": {"text", "multi_modal": null},
  "relevance_score"}]}``, best first. Usage counts the query once plus every document.

Everything here is pure: ids, times, texts and counts come in as arguments.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson


def typed_sse(payload: dict[str, Any]) -> bytes:
    """One ``event: TYPE`` + ``data`` SSE event (Responses and Messages streams)."""
    return b"event: " + str(payload["type"]).encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def anthropic_error(message: str, error_type: str) -> dict[str, Any]:
    """vLLM's Anthropic-shaped error (its ``type`` is the exception name, e.g. ``NotFoundError``)."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


@dataclass(frozen=True)
class Counts:
    """Token counts of one answer (prompt, of which cached and created in the cache; output)."""

    prompt: int
    cached: int
    created: int
    output: int


def responses_usage(counts: Counts) -> dict[str, Any]:
    return {
        "input_tokens": counts.prompt,
        "input_tokens_details": {"cached_tokens": counts.cached, "cache_write_tokens": counts.created,
                                 "input_tokens_per_turn": [], "cached_tokens_per_turn": []},
        "output_tokens": counts.output,
        "output_tokens_details": {"reasoning_tokens": 0, "tool_output_tokens": 0, "output_tokens_per_turn": [],
                                  "tool_output_tokens_per_turn": []},
        "total_tokens": counts.prompt + counts.output,
    }


def output_message(item_id: str, text: str) -> dict[str, Any]:
    part = {"annotations": [], "text": text, "type": "output_text", "logprobs": None}
    return {"id": item_id, "content": [part], "role": "assistant", "status": "completed", "type": "message",
            "phase": None}


def response_object(rid: str, created: int, model: str, body: dict[str, Any], *, status: str,
                    output: list[dict[str, Any]], usage: dict[str, Any] | None) -> dict[str, Any]:
    """A ``response`` object; request fields echoed from ``body`` (vLLM's defaults otherwise)."""
    incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
    return {
        "id": rid, "created_at": created, "incomplete_details": incomplete,
        "instructions": body.get("instructions"), "metadata": body.get("metadata"), "model": model,
        "object": "response", "output": output, "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "temperature": float(body.get("temperature", 1.0)), "tool_choice": body.get("tool_choice", "none"),
        "tools": body.get("tools") or [], "top_p": float(body.get("top_p", 1.0)),
        "background": bool(body.get("background", False)), "max_output_tokens": body.get("max_output_tokens"),
        "max_tool_calls": None, "previous_response_id": body.get("previous_response_id"), "prompt": None,
        "reasoning": body.get("reasoning"), "service_tier": "auto", "status": status, "text": None,
        "top_logprobs": None, "truncation": "disabled", "usage": usage, "user": body.get("user"),
        "presence_penalty": 0.0, "frequency_penalty": 0.0, "kv_transfer_params": None,
        "ec_transfer_params": None, "input_messages": None, "output_messages": None,
    }


def sequence_of(block: bytes) -> int:
    """The ``sequence_number`` of one framed Responses event (``event: ...\ndata: {...}``), else -1."""
    for line in block.split(b"\n"):
        if line.startswith(b"data: "):
            try:
                number = orjson.loads(line[6:]).get("sequence_number")
            except orjson.JSONDecodeError:
                return -1
            return number if isinstance(number, int) else -1
    return -1


class ResponsesStream:
    """Numbers and frames the events of one streamed response (``sequence_number`` from 0)."""

    def __init__(self, skeleton: dict[str, Any], item_id: str) -> None:
        self.skeleton = skeleton  # the response object with status in_progress, no output, no usage
        self.item_id = item_id
        self.sequence = -1

    def event(self, kind: str, **fields: Any) -> bytes:
        self.sequence += 1
        return typed_sse({**fields, "sequence_number": self.sequence, "type": kind})

    def head(self) -> bytes:
        item = {"id": self.item_id, "content": [], "role": "assistant", "status": "in_progress", "type": "message",
                "phase": None}
        part = {"annotations": [], "text": "", "type": "output_text", "logprobs": []}
        return b"".join((
            self.event("response.created", response=self.skeleton),
            self.event("response.in_progress", response=self.skeleton),
            self.event("response.output_item.added", item=item, output_index=0),
            self.event("response.content_part.added", content_index=0, item_id=self.item_id, output_index=0, part=part),
        ))

    def token(self, text: str) -> bytes:
        return self.event("response.output_text.delta", content_index=0, delta=text, item_id=self.item_id,
                          logprobs=[], output_index=0)

    def tail(self, text: str, final: dict[str, Any]) -> bytes:
        message = output_message(self.item_id, text)
        return b"".join((
            self.event("response.output_text.done", content_index=0, item_id=self.item_id, logprobs=[],
                       output_index=0, text=text),
            self.event("response.content_part.done", content_index=0, item_id=self.item_id, output_index=0,
                       part=message["content"][0]),
            self.event("response.output_item.done", item=message, output_index=0),
            self.event("response.completed", response=final),
        ))

    def error(self, message: str) -> bytes:
        return self.event("error", code="server_error", message=message, param=None)


def anthropic_usage(counts: Counts) -> dict[str, Any]:
    return {"input_tokens": max(0, counts.prompt - counts.cached - counts.created), "output_tokens": counts.output,
            "cache_creation_input_tokens": counts.created, "cache_read_input_tokens": counts.cached}


def stop_reason(finish_reason: str) -> str:
    return "max_tokens" if finish_reason == "length" else "end_turn"


def message_object(mid: str, model: str, text: str, finish_reason: str, counts: Counts) -> dict[str, Any]:
    return {"id": mid, "type": "message", "role": "assistant", "content": [{"type": "text", "text": text}],
            "model": model, "stop_reason": stop_reason(finish_reason), "usage": anthropic_usage(counts)}


class MessagesStream:
    """Frames the events of one streamed Anthropic message."""

    def __init__(self, mid: str, model: str) -> None:
        self.mid, self.model = mid, model

    def head(self, prompt_tokens: int) -> bytes:
        message = {"id": self.mid, "type": "message", "role": "assistant", "content": [], "model": self.model,
                   "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": prompt_tokens, "output_tokens": 0}}
        return (typed_sse({"type": "message_start", "message": message})
                + typed_sse({"type": "content_block_start", "content_block": {"type": "text", "text": ""}, "index": 0}))

    def token(self, text: str) -> bytes:
        return typed_sse({"type": "content_block_delta", "delta": {"type": "text_delta", "text": text}, "index": 0})

    def tail(self, finish_reason: str, counts: Counts) -> bytes:
        delta = {"stop_reason": stop_reason(finish_reason), "stop_sequence": None}
        return b"".join((
            typed_sse({"type": "content_block_stop", "index": 0}),
            typed_sse({"type": "message_delta", "delta": delta, "usage": anthropic_usage(counts)}),
            typed_sse({"type": "message_stop"}),
        ))

    def error(self, message: str) -> bytes:
        return typed_sse(anthropic_error(message, "InternalServerError"))


def embedding(tokens: Sequence[int], dim: int) -> list[float]:
    """A deterministic unit vector of ``dim`` floats for ``tokens`` (feature hashing of unigrams
    and bigrams: similar texts get similar vectors)."""
    vector = [0.0] * dim
    previous = 0
    for token in tokens:
        for feature in (token, previous * 1_000_003 + token):
            h = (feature * 2_654_435_761) & 0xFFFFFFFF
            vector[h % dim] += 1.0 if h & 0x10000 else -1.0
        previous = token
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [round(v / norm, 6) for v in vector]


def embedding_data(index: int, vector: list[float], encoding: str) -> dict[str, Any]:
    value: list[float] | str = vector
    if encoding == "base64":
        value = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
    return {"index": index, "object": "embedding", "embedding": value}


def embeddings_response(eid: str, created: int, model: str, data: list[dict[str, Any]], prompt_tokens: int) -> dict[str, Any]:
    return {"id": eid, "object": "list", "created": created, "model": model, "data": data,
            "usage": pooling_usage(prompt_tokens)}


def pooling_usage(prompt_tokens: int) -> dict[str, Any]:
    """The usage of an embeddings or score answer (vLLM's ``UsageInfo``: no output tokens)."""
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens, "completion_tokens": 0,
            "prompt_tokens_details": None, "completion_tokens_details": None}


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    """The cosine of two vectors (0.0 when either is all zeros)."""
    norm = math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b))
    return sum(x * y for x, y in zip(a, b, strict=True)) / norm if norm else 0.0


def score_response(sid: str, created: int, model: str, scores: Sequence[float], prompt_tokens: int) -> dict[str, Any]:
    return {"id": sid, "object": "list", "created": created, "model": model,
            "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)],
            "usage": pooling_usage(prompt_tokens)}


def rerank_response(sid: str, model: str, documents: Sequence[str], scores: Sequence[float],
                    prompt_tokens: int) -> dict[str, Any]:
    order = sorted(range(len(documents)), key=lambda i: -scores[i])
    return {"id": sid, "model": model, "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
            "results": [{"index": i, "document": {"text": documents[i], "multi_modal": None},
                         "relevance_score": scores[i]} for i in order]}
