"""The OpenAI request fields kvgate reads; everything else passes through untouched.

The body is parsed once (orjson). Only the fields routing and observation need are validated:
``model``, ``messages`` (chat) or ``prompt`` (completions), and every other field kvgate reads
(``stream``, ``stream_options``, ``user``, ``prompt_cache_key``, the reasoning switches, ``tools``,
...) and the integer fields (``max_tokens``, ``n``, ``seed``, ``logprobs``, ...): the tables in
``protocol/validation.py``, which also bounds the nesting depth. Any other field (temperature,
stop, vLLM extras, ...) is neither checked nor changed: the original bytes are forwarded,
re-serialized only when the endpoint's served model name differs from the name the client sent
(an integral ``5.0`` in an integer field then goes out as ``5``). Reference: https://platform.openai.com/docs/api-reference/chat/create
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import InvalidRequestError
from gateway.protocol.validation import CHAT_FIELDS, COMPLETION_FIELDS, check_depth, check_fields, check_messages


class Operation(enum.Enum):
    """An OpenAI inference operation and its path below the ``/v1`` base URL."""

    CHAT = "/chat/completions"
    COMPLETION = "/completions"

    @property
    def path(self) -> str:
        return self.value


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class InferenceRequest:
    """A validated inference request.

    Attributes:
        operation: chat or text completion.
        model: the public model name or alias the client sent.
        stream: whether the client asked for SSE.
        body: the parsed JSON object (treat as read-only).
        raw: the original body bytes, forwarded when the model name needs no rewrite.
    """

    operation: Operation
    model: str
    stream: bool
    body: dict[str, Any]
    raw: bytes

    @property
    def wants_usage(self) -> bool:
        """Whether the client asked for the stream's usage chunk (``stream_options.include_usage``)."""
        options = self.body.get("stream_options")
        return isinstance(options, dict) and options.get("include_usage") is True

    def body_for(self, served_model: str, *, ask_usage: bool = False) -> bytes:
        """The bytes to send to an endpoint serving ``served_model`` (original unless renamed).

        ``ask_usage``: also ask for the stream's usage chunk (:func:`usage_stream_options`) for a
        client that did not; the relay then strips that chunk before the client sees it. Without
        a ``stream_options`` in the body and without a rename, the member is spliced in front of
        the original bytes (they are not re-serialized).
        """
        if ask_usage and "stream_options" not in self.body and served_model == self.model:
            start = self.raw.find(b"{") + 1
            return self.raw[:start] + b'"stream_options":{"include_usage":true},' + self.raw[start:]
        if served_model == self.model and not ask_usage:
            return self.raw
        body = {**self.body, "model": served_model}
        if ask_usage:
            body["stream_options"] = usage_stream_options(self.body)
        return orjson.dumps(body)


def usage_stream_options(body: dict[str, Any]) -> dict[str, Any]:
    """The client's ``stream_options`` with ``include_usage: true``; without vLLM's
    ``continuous_usage_stats``, which would put usage in every chunk (the client asked for none)."""
    options = body.get("stream_options")
    kept = {k: v for k, v in options.items() if k != "continuous_usage_stats"} if isinstance(options, dict) else {}
    return {**kept, "include_usage": True}


def _invalid(message: str, param: str | None = None) -> InvalidRequestError:
    return InvalidRequestError(message, param=param)


def _is_token(value: Any) -> bool:
    """A token id: a non-negative integer below 2**32 (no vocabulary is larger)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**32


def _check_prompt(prompt: Any) -> None:
    if isinstance(prompt, str):
        return
    if isinstance(prompt, list) and prompt:
        if all(isinstance(item, str) for item in prompt):
            return
        if all(_is_token(item) for item in prompt):
            return
        if all(isinstance(item, list) and all(_is_token(t) for t in item) for item in prompt):
            return
    raise _invalid(
        "Invalid type for 'prompt': expected a string, an array of strings, or an array of tokens "
        "(token ids are integers in [0, 2**32)).", "prompt"
    )


def parse_request(operation: Operation, raw: bytes) -> InferenceRequest:
    """Parse and validate ``raw`` for ``operation``.

    Raises:
        InvalidRequestError: not JSON, not an object, or a field kvgate reads is missing or of
            the wrong type (``param`` names it).
    """
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _invalid(
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
            "using your HTTP library correctly. The OpenAI API expects a JSON payload.)"
        ) from None
    if not isinstance(body, dict):
        raise _invalid("The request body must be a JSON object.")
    model = body.get("model")
    if model is None:
        raise _invalid("Missing required parameter: 'model'.", "model")
    if not isinstance(model, str) or not model:
        raise _invalid("Invalid type for 'model': expected a non-empty string.", "model")
    if operation is Operation.CHAT:
        if "messages" not in body:
            raise _invalid("Missing required parameter: 'messages'.", "messages")
        check_messages(body["messages"])
        check_fields(body, CHAT_FIELDS)
    else:
        if "prompt" not in body:
            raise _invalid("Missing required parameter: 'prompt'.", "prompt")
        _check_prompt(body["prompt"])
        check_fields(body, COMPLETION_FIELDS)
    check_depth(raw, body)
    return InferenceRequest(operation, model, bool(body.get("stream")), body, raw)
