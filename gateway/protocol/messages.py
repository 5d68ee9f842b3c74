"""Anthropic's Messages API (``/v1/messages``) as kvgate reads it: request, prompt, usage, errors.

Paths: ``POST /v1/messages`` (stream and not) and ``POST /v1/messages/count_tokens``, as vLLM
0.32 serves them. Reference: https://docs.anthropic.com/en/api/messages

**Client key**: the ``anthropic`` SDK sends its key as ``x-api-key`` (with ``anthropic-version``);
:func:`client_key` reads it (else a ``Bearer`` token). :data:`CLIENT_HEADERS` are never forwarded
to an endpoint.

**Request** (:func:`parse_create`, :func:`parse_count_tokens`): ``model`` (required), ``messages``
(required: an array of objects with a string ``role`` and a string or array ``content``),
``max_tokens`` (required for a create: an integer >= 1), and the fields kvgate reads: ``stream``
(boolean), ``system`` (a string or an array of text blocks), ``tools`` (array), ``metadata``
(object; ``metadata.user_id`` is the affinity user). Anything else passes through unchecked.

**Prompt**: ``system`` as a system message, then the messages; text blocks are chat text parts,
so a Messages request and a chat request of the same conversation hash alike (vLLM renders both
through the same chat template); other blocks (images, ``tool_use``, ``tool_result``) are hashed
as JSON.

**Usage** (:func:`usage_of`): Anthropic counts ``input_tokens`` *without* the cached part:
input = ``input_tokens + cache_read_input_tokens + cache_creation_input_tokens``, cached =
``cache_read_input_tokens``, output = ``output_tokens`` (vLLM writes them so, from its
``prompt_tokens_details``). In a stream: ``message_start.message.usage``, then
``message_delta.usage`` (which overrides the fields it carries).

**Errors** on these paths have Anthropic's shape, never OpenAI's:
``{"type": "error", "error": {"type": "invalid_request_error", "message": ...}}``
(:func:`error_body`; the type follows the status as Anthropic names them: 400
``invalid_request_error``, 401 ``authentication_error``, 403 ``permission_error``, 404
``not_found_error``, 413 ``request_too_large``, 429 ``rate_limit_error``, 503 (kvgate's
``no_healthy_endpoint``, with ``Retry-After``) and 529 ``overloaded_error``, 504
``timeout_error``, any other 5xx ``api_error``), kvgate's 404 and 405 included. An
endpoint's own error in that shape is relayed as it came when its type is one of Anthropic's;
vLLM's own types (``BadRequestError``) get the status's type, the message kept. In a stream:
``event: error`` with the same object. ``anthropic-version`` and ``anthropic-beta`` are read and
ignored (any value is accepted; neither is forwarded).

**Stream** (:class:`MessagesStreamObserver`): ``message_start``, ``content_block_start``,
``content_block_delta`` (the tokens), ``content_block_stop``, ``message_delta``,
``message_stop`` (terminal); ``ping`` may come anywhere. Never continued mid-stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from gateway.errors import GatewayError, UpstreamClientError
from gateway.keys.pricing import TokenUsage
from gateway.protocol.api_request import ApiRequest, chat_view, invalid, load_object, optional, optional_count, require_model
from gateway.protocol.typed_events import TypedEventObserver, count, error_object

CREATE = "messages"
COUNT_TOKENS = "messages.count_tokens"

CLIENT_HEADERS = ("x-api-key", "anthropic-version", "anthropic-beta")
"""Request headers that carry the client's credentials and API version: read, never forwarded."""

_ERROR_TYPES = {
    400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
    500: "api_error", 502: "api_error", 503: "overloaded_error", 504: "timeout_error",
    529: "overloaded_error",
}
_TYPES = frozenset((*_ERROR_TYPES.values(), "billing_error"))  # Anthropic's own ``error.type`` names


def client_key(headers: Mapping[str, str]) -> str | None:
    """The client's API key: ``x-api-key``, else ``Authorization: Bearer KEY``; None if neither.

    ``headers``: lower-case names (as the edge hands them over).
    """
    key = headers.get("x-api-key")
    if key:
        return key.strip()
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer " and auth[7:].strip():
        return auth[7:].strip()
    return None


def _check_messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise invalid("Invalid type for 'messages': expected a non-empty array of objects.", "messages")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise invalid(f"Invalid type for 'messages[{index}]': expected an object.", f"messages[{index}]")
        if not isinstance(message.get("role"), str):
            raise invalid(f"Invalid type for 'messages[{index}].role': expected a string.", f"messages[{index}].role")
        if not isinstance(message.get("content"), str | list):
            raise invalid(
                f"Invalid type for 'messages[{index}].content': expected a string or an array of content blocks.",
                f"messages[{index}].content",
            )
    return messages


def _parse(raw: bytes, api: str) -> ApiRequest:
    body = load_object(raw, "The Messages API")
    model = require_model(body)
    if "messages" not in body:
        raise invalid("Missing required parameter: 'messages'.", "messages")
    messages = _check_messages(body["messages"])
    if api == CREATE:
        if "max_tokens" not in body:
            raise invalid("Missing required parameter: 'max_tokens'.", "max_tokens")
        if optional_count(body, "max_tokens") is None:
            raise invalid("Invalid 'max_tokens': expected an integer of at least 1.", "max_tokens")
    optional(body, "stream", (bool,), "a boolean")
    optional(body, "system", (str, list), "a string or an array of text blocks")
    optional(body, "tools", (list,), "an array")
    metadata = optional(body, "metadata", (dict,), "an object")
    stream = api == CREATE and body.get("stream") is True
    view = {**body, "user": metadata.get("user_id")} if metadata and isinstance(metadata.get("user_id"), str) else body
    prompt = chat_view(model, stream, view, raw, prompt_messages(body["system"] if "system" in body else None, messages),
                       body.get("tools"), "max_tokens")
    return ApiRequest(api, model, stream, body, raw, prompt if api == CREATE else None)


def parse_create(raw: bytes) -> ApiRequest:
    """Parse and validate ``POST /v1/messages`` (InvalidRequestError naming the field)."""
    return _parse(raw, CREATE)


def parse_count_tokens(raw: bytes) -> ApiRequest:
    """Parse and validate ``POST /v1/messages/count_tokens`` (no ``max_tokens``; never streams,
    never hashed: it generates nothing and fills no cache)."""
    return _parse(raw, COUNT_TOKENS)


def prompt_messages(system: Any, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``system`` + ``messages`` as chat messages (text blocks are already chat text parts)."""
    out: list[dict[str, Any]] = []
    if isinstance(system, str) and system:
        out.append({"role": "system", "content": system})
    elif isinstance(system, list) and system:
        out.append({"role": "system", "content": [_block(block) for block in system]})
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = [_block(block) for block in content]
        out.append({"role": message["role"], "content": content})
    return out


def _block(block: Any) -> Any:
    """A text block as a chat text part (without ``cache_control``); any other block as it is."""
    if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
        return {"type": "text", "text": block["text"]}
    return block


def usage_of(body: Any) -> TokenUsage | None:
    """Token counts of a message's ``usage`` (see the module docstring); None if absent/malformed."""
    usage = body.get("usage") if isinstance(body, dict) else None
    return tokens_of(usage) if isinstance(usage, dict) else None


def tokens_of(usage: Mapping[str, Any]) -> TokenUsage:
    """Anthropic usage fields -> :class:`TokenUsage` (input includes the cached tokens)."""
    read = count(usage.get("cache_read_input_tokens"))
    created = count(usage.get("cache_creation_input_tokens"))
    return TokenUsage(count(usage.get("input_tokens")) + read + created, read, count(usage.get("output_tokens")))


def error_type(status: int) -> str:
    """Anthropic's ``error.type`` for an HTTP status."""
    if status in _ERROR_TYPES:
        return _ERROR_TYPES[status]
    return "invalid_request_error" if status < 500 else "api_error"


def owns_path(path: str) -> bool:
    """Whether ``path`` is under ``/v1/messages`` (every error there has Anthropic's shape)."""
    return path == "/v1/messages" or path.startswith("/v1/messages/")


def error_body(error: GatewayError) -> bytes:
    """``error`` in Anthropic's shape: ``{"type": "error", "error": {"type", "message"}}``, the
    type by status (:func:`error_type`).

    An endpoint's own error already in that shape, with one of Anthropic's types, is returned as
    it came; vLLM's (``BadRequestError``, ...) gets the type of its status, its message kept.
    """
    if isinstance(error, UpstreamClientError) and error.raw is not None:
        try:
            parsed = orjson.loads(error.raw)
        except orjson.JSONDecodeError:
            parsed = None
        if (isinstance(parsed, dict) and parsed.get("type") == "error" and isinstance(parsed.get("error"), dict)
                and parsed["error"].get("type") in _TYPES):
            return error.raw
    return orjson.dumps({"type": "error", "error": {"type": error_type(error.status), "message": error.message}})


class MessagesStreamObserver(TypedEventObserver):
    """Watches a Messages stream (see the module docstring); ``response_id`` is the message id."""

    PREAMBLE = frozenset(("message_start", "content_block_start", "ping"))

    def __init__(self, clock: Any, *, collect: bool = False) -> None:
        super().__init__(clock, collect=collect)
        self._usage: dict[str, Any] = {}

    def _observe_typed(self, kind: str, event: dict[str, Any]) -> None:
        if kind == "content_block_delta":
            self._output()
        elif kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict):
                if isinstance(message.get("id"), str):
                    self.response_id = message["id"]
                self._add_usage(message.get("usage"))
        elif kind == "message_delta":
            self._add_usage(event.get("usage"))
            delta = event.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self.finish_reasons.append(delta["stop_reason"])
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            self.error = error_object(event.get("error"))

    def _add_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self._usage.update(usage)
            self.tokens = tokens_of(self._usage)

    def error_event(self, message: str) -> bytes:
        """``event: error`` with an ``api_error`` naming the cause."""
        payload = {"type": "error", "error": {"type": "api_error",
                                              "message": f"Upstream endpoint failed mid-stream: {message}."}}
        return self._separator() + b"event: error\ndata: " + orjson.dumps(payload) + b"\n\n"
