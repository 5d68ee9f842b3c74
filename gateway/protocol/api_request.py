"""The request view every API module returns: the few fields kvgate reads, and the original bytes.

Chat and text completions keep :class:`~gateway.protocol.openai.InferenceRequest`; the APIs added
by issue 19 (Responses, Messages, embeddings, rerank, score) parse into an :class:`ApiRequest`:
its ``api`` (the row name in :mod:`gateway.protocol.apis`), ``model``, ``stream``, the parsed
``body`` (read-only) and the ``raw`` bytes forwarded as they came (re-serialized only when the
endpoint serves the model under another name). ``prompt`` is the chat-shaped view kvgate hashes
for prefix routing and reads for route selection (None: the API has no prompt to hash), so
:class:`~gateway.prefix.hashing.PromptHasher` and :mod:`gateway.selection.prompt` read every API
through the one chat canonical form. ``state_id`` is the stored response the request depends on
(``previous_response_id``, or the ``{id}`` of ``GET /v1/responses/{id}``), routed by affinity.

:func:`load_object` and :func:`require_model` are the parse steps every API shares, with the
same messages (and 400 ``invalid_request_error``) as the chat parser.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from gateway.errors import InvalidRequestError
from gateway.protocol.openai import InferenceRequest, Operation
from gateway.protocol.validation import INT32_MAX, check_depth, check_integer


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class ApiRequest:
    """A validated request of a non-chat API.

    Attributes:
        api: the API's name in :data:`gateway.protocol.apis.APIS` (``responses``, ``messages``, ...).
        model: the public model name or alias the client sent ("" for a request about a stored
            response, which names none: it is routed by ``state_id`` alone).
        stream: whether the client asked for SSE.
        body: the parsed JSON object (treat as read-only); ``{}`` for a body-less request.
        raw: the original body bytes.
        prompt: the chat-shaped view for prefix hashing and route selection, or None.
        state_id: the stored response this request needs (its endpoint holds it), or None.
    """

    api: str
    model: str
    stream: bool
    body: dict[str, Any]
    raw: bytes
    prompt: InferenceRequest | None = None
    state_id: str | None = None

    def body_for(self, served_model: str) -> bytes:
        """The bytes to send to an endpoint serving ``served_model`` (the original unless renamed)."""
        if served_model == self.model or not self.model:
            return self.raw
        return orjson.dumps({**self.body, "model": served_model})


def invalid(message: str, param: str | None = None) -> InvalidRequestError:
    """A 400 ``invalid_request_error`` naming ``param``."""
    return InvalidRequestError(message, param=param)


def load_object(raw: bytes, service: str = "The OpenAI API") -> dict[str, Any]:
    """``raw`` parsed as a JSON object, nesting bounded (:func:`~gateway.protocol.validation.check_depth`);
    ``service`` is named in the bad-JSON hint (Messages: ``"The Messages API"``).

    Raises:
        InvalidRequestError: not JSON, not an object, or nested too deep.
    """
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise invalid(
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't "
            f"using your HTTP library correctly. {service} expects a JSON payload.)"
        ) from None
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.")
    check_depth(raw, body)
    return body


def require_model(body: dict[str, Any]) -> str:
    """The body's ``model``: a non-empty string (InvalidRequestError otherwise)."""
    model = body.get("model")
    if model is None:
        raise invalid("Missing required parameter: 'model'.", "model")
    if not isinstance(model, str) or not model:
        raise invalid("Invalid type for 'model': expected a non-empty string.", "model")
    return model


def optional(body: dict[str, Any], name: str, kinds: tuple[type, ...], what: str) -> Any:
    """``body[name]`` if absent/null or of ``kinds`` (a bool is never an int); else a 400 naming it."""
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) and bool not in kinds:
        raise invalid(f"Invalid type for '{name}': expected {what}, but got a boolean instead.", name)
    if not isinstance(value, kinds):
        raise invalid(f"Invalid type for '{name}': expected {what}.", name)
    return value


def optional_count(body: dict[str, Any], name: str, low: int = 1, high: int = INT32_MAX) -> int | None:
    """``body[name]`` as an int when present and not null: an integer (or an integral number) in
    ``[low, high]``, else the 400 chat's integer fields give (``integer_below_min_value``,
    ``integer_above_max_value``, or "expected an integer" for a decimal, a boolean or a string)."""
    value = body.get(name)
    return None if value is None else check_integer(name, value, (low, high))


def chat_view(model: str, stream: bool, body: dict[str, Any], raw: bytes,
              messages: list[dict[str, Any]], tools: Any = None, output_cap: str | None = None) -> InferenceRequest:
    """A chat-shaped :class:`InferenceRequest` over ``messages`` for the hasher and the selector.

    Carries the fields those read besides the messages: ``tools``, ``cache_salt``,
    ``prompt_cache_key``, ``user``, the reasoning switches (``reasoning``) and, as chat's
    ``max_tokens``, the API's own output cap ``body[output_cap]`` (Messages ``max_tokens``,
    Responses ``max_output_tokens``): the key's quota reserves it and kvgate's context-length
    check counts it, as for chat.
    """
    view: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        view["tools"] = tools
    if output_cap is not None and body.get(output_cap) is not None:
        view["max_tokens"] = body[output_cap]
    for name in ("cache_salt", "prompt_cache_key", "user", "reasoning"):
        value = body.get(name)
        if value is not None:
            view[name] = value
    return InferenceRequest(Operation.CHAT, model, stream, view, raw)
