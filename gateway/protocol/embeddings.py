"""Pooling APIs (embeddings, rerank, score) as kvgate reads them: request and usage.

Paths (vLLM 0.32 with a pooling model, ``--runner pooling``): ``POST /v1/embeddings``
(https://platform.openai.com/docs/api-reference/embeddings), ``POST /v1/rerank`` and
``POST /v1/score`` (vLLM's, Jina/Cohere-like). A generate model's vLLM answers these with 404
``{"detail": "Not Found"}``, so they are routed only to clusters that serve a pooling model.

**Request**: ``model`` (required) and the input, checked as far as kvgate needs it:
embeddings ``input`` is a non-empty string, array of strings, array of token ids or array of
token-id arrays; rerank has a string ``query`` and an array ``documents``; score is passed on
as it is (vLLM checks its ``text_1``/``text_2`` or ``queries``/``items``). These never stream
and are never hashed for prefix routing (a pooling pass leaves no prefix cache worth routing to).

**Usage** (:func:`usage_of`): ``usage.prompt_tokens`` (rerank answers only ``total_tokens``) is
the input; there is no output and no cached part.
"""

from __future__ import annotations

from typing import Any

from gateway.keys.pricing import TokenUsage
from gateway.protocol.api_request import ApiRequest, invalid, load_object, optional, optional_count, require_model
from gateway.protocol.typed_events import count

EMBEDDINGS = "embeddings"
RERANK = "rerank"
SCORE = "score"


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**32


def _check_input(value: Any) -> None:
    if isinstance(value, str) and value:
        return
    if isinstance(value, list) and value:
        if all(isinstance(item, str) for item in value):
            return
        if all(_is_token(item) for item in value):
            return
        if all(isinstance(item, list) and item and all(_is_token(t) for t in item) for item in value):
            return
    raise invalid(
        "Invalid 'input': expected a non-empty string, array of strings, array of token ids or "
        "array of token-id arrays.", "input"
    )


def parse_embeddings(raw: bytes) -> ApiRequest:
    """Parse and validate ``POST /v1/embeddings`` (InvalidRequestError naming the field)."""
    body = load_object(raw)
    model = require_model(body)
    if "input" not in body:
        raise invalid("Missing required parameter: 'input'.", "input")
    _check_input(body["input"])
    optional(body, "encoding_format", (str,), "a string")
    optional_count(body, "dimensions")
    optional(body, "user", (str,), "a string")
    return ApiRequest(EMBEDDINGS, model, False, body, raw)


def parse_rerank(raw: bytes) -> ApiRequest:
    """Parse and validate ``POST /v1/rerank``: a string ``query`` and an array ``documents``."""
    body = load_object(raw)
    model = require_model(body)
    if not isinstance(body.get("query"), str):
        raise invalid("Missing or invalid 'query': expected a string.", "query")
    if not isinstance(body.get("documents"), list):
        raise invalid("Missing or invalid 'documents': expected an array.", "documents")
    optional(body, "top_n", (int,), "an integer")
    return ApiRequest(RERANK, model, False, body, raw)


def parse_score(raw: bytes) -> ApiRequest:
    """Parse ``POST /v1/score``: only ``model`` is checked (the engine judges the rest)."""
    body = load_object(raw)
    return ApiRequest(SCORE, require_model(body), False, body, raw)


def usage_of(body: Any) -> TokenUsage | None:
    """Input tokens of a pooling answer's ``usage``; None if absent or malformed."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens")
    return TokenUsage(count(prompt if prompt is not None else usage.get("total_tokens")), 0, 0)
