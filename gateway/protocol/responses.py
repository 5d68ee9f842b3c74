"""The OpenAI Responses API (``/v1/responses``) as kvgate reads it: request, prompt, usage, stream.

Paths: ``POST /v1/responses`` (stream and not), ``GET /v1/responses/{id}``,
``POST /v1/responses/{id}/cancel`` and ``DELETE /v1/responses/{id}`` (vLLM 0.32 has no DELETE: it
answers 405, relayed as it comes). Reference: https://platform.openai.com/docs/api-reference/responses

**Request** (:func:`parse_create`): ``model`` (required), ``input`` (required: a string or an
array of input items), and the fields kvgate reads: ``stream``, ``instructions`` (string),
``previous_response_id`` (string), ``store``/``background`` (booleans), ``include`` (array),
``max_output_tokens`` (an integer >= 1: reserved by the key's quota and counted by the
context-length check, as chat's ``max_tokens``),
``tools`` (array), ``user``/``prompt_cache_key``/``cache_salt`` (strings), ``reasoning`` (object).
Anything else passes through unchecked. :func:`parse_resource` makes the view of a request about
a stored response (``{id}``: 1-128 characters of ``[A-Za-z0-9_-]``); it names no model and is
routed by **state affinity** alone (:mod:`gateway.state.response_affinity`).

**State affinity**: a stored response (and its chain, and the encrypted reasoning items of
``include: ["reasoning.encrypted_content"]``) lives on the endpoint that made it. The view's
``state_id`` is the response it depends on (``previous_response_id``, or the ``{id}``);
:func:`stores` says whether the answer's id must be recorded (``store`` is not false, or
``background``); :func:`response_id_of` reads that id from a buffered answer, and the stream
observer's ``response_id`` from ``response.created``.

**Prompt** (for prefix hashing and route selection): ``instructions`` as a system message, then
``input`` as chat messages (a string is one user message; ``message`` items keep their role and
their ``input_text`` parts become text parts; ``function_call`` items become an assistant's tool
call and ``function_call_output`` a tool message; other items are hashed as JSON), which is how
vLLM renders them through the chat template. The history behind ``previous_response_id`` is
not in the request; affinity already pins such a request to the endpoint that holds it.

**Usage**: ``usage.input_tokens``, ``usage.input_tokens_details.cached_tokens`` and
``usage.output_tokens`` of the response object (the buffered body, or ``response.completed`` /
``response.incomplete`` in a stream).

**Stream** (:class:`ResponsesStreamObserver`): ``event: response.X`` + ``data`` with a
``sequence_number``; relayed byte for byte. Terminal events: ``response.completed``,
``response.incomplete``, ``response.failed`` (the last one is an error). In-stream error:
``{"type": "error", "code", "message"}``. A break after content ends with a ``response.failed``
built from the stream's own ``response.created`` (or an ``error`` event before it), numbered
after the last ``sequence_number`` seen. Mid-stream continuation is a chat-completions feature:
a Responses stream is never continued.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from gateway.keys.pricing import TokenUsage
from gateway.protocol.api_request import ApiRequest, chat_view, invalid, load_object, optional, optional_count, require_model
from gateway.protocol.typed_events import TypedEventObserver, count, error_object

CREATE = "responses"
RETRIEVE = "responses.retrieve"
CANCEL = "responses.cancel"
DELETE = "responses.delete"

_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_STRINGS = ("instructions", "previous_response_id", "user", "prompt_cache_key", "cache_salt")
_BOOLEANS = ("stream", "store", "background")
_ARRAYS = ("include", "tools")


def parse_create(raw: bytes) -> ApiRequest:
    """Parse and validate ``POST /v1/responses``.

    Raises:
        InvalidRequestError: not a JSON object, or a field kvgate reads is missing or of the
            wrong type (``param`` names it).
    """
    body = load_object(raw)
    model = require_model(body)
    if "input" not in body:
        raise invalid("Missing required parameter: 'input'.", "input")
    if not isinstance(body["input"], str | list):
        raise invalid("Invalid type for 'input': expected a string or an array of input items.", "input")
    if isinstance(body["input"], list) and not all(isinstance(item, dict) for item in body["input"]):
        raise invalid("Invalid type for 'input': expected an array of objects.", "input")
    for name in _STRINGS:
        optional(body, name, (str,), "a string")
    for name in _BOOLEANS:
        optional(body, name, (bool,), "a boolean")
    for name in _ARRAYS:
        optional(body, name, (list,), "an array")
    optional(body, "reasoning", (dict,), "an object")
    optional_count(body, "max_output_tokens")
    stream = body.get("stream") is True
    previous = body.get("previous_response_id")
    if previous is not None:
        check_id(previous, "previous_response_id")
    prompt = chat_view(model, stream, body, raw, prompt_messages(body), body.get("tools"), "max_output_tokens")
    return ApiRequest(CREATE, model, stream, body, raw, prompt, previous or encrypted_item_id(body["input"]))


def state_param(request: ApiRequest) -> str:
    """The request field that named ``request.state_id`` (for the error that names it)."""
    if request.api != CREATE:
        return "response_id"
    return "previous_response_id" if request.body.get("previous_response_id") else "input"


def _encrypted(item: Any) -> bool:
    return (isinstance(item, dict) and item.get("type") == "reasoning" and bool(item.get("encrypted_content"))
            and isinstance(item.get("id"), str) and _ID.fullmatch(item["id"]) is not None)


def encrypted_item_id(items: Any) -> str | None:
    """The id of the first input reasoning item with ``encrypted_content`` (only its endpoint can
    decrypt it), or None."""
    for item in items if isinstance(items, list) else ():
        if _encrypted(item):
            return str(item["id"])
    return None


def ids_to_record(request: ApiRequest, response: Any) -> list[str]:
    """The ids to record -> this endpoint for an answer to ``request`` (a response object): its own
    id when :func:`stores`, and the ids of its reasoning items with ``encrypted_content`` (always:
    they are the state of a ``store: false`` conversation)."""
    if not isinstance(response, dict):
        return []
    ids = []
    own = response.get("id")
    if stores(request) and isinstance(own, str) and _ID.fullmatch(own):
        ids.append(own)
    output = response.get("output")
    if isinstance(output, list):
        ids.extend(str(item["id"]) for item in output if _encrypted(item))
    return ids


def runs_in_background(request: ApiRequest, response: Any) -> bool:
    """Whether ``response`` (the answer to a create) is a ``background`` response still running
    (``queued`` / ``in_progress``): generated, and so charged, after the answer."""
    return (request.body.get("background") is True and isinstance(response, dict)
            and isinstance(response.get("id"), str) and response.get("status") in ("queued", "in_progress"))


def parse_resource(api: str, response_id: str) -> ApiRequest:
    """The view of ``GET /v1/responses/{id}`` (``api`` = :data:`RETRIEVE`), ``.../cancel``
    (:data:`CANCEL`) or ``DELETE`` (:data:`DELETE`): no model, no body, ``state_id`` = the id.

    Raises:
        InvalidRequestError: the id is not 1-128 characters of ``[A-Za-z0-9_-]``.
    """
    check_id(response_id, "response_id")
    return ApiRequest(api, "", False, {}, b"", None, response_id)


def streamed(query: bytes) -> bool:
    """Whether a retrieve's query string asks for a stream (``stream=true``, as the SDK sends it)."""
    return any(part.strip().lower() in (b"stream=true", b"stream=1") for part in query.split(b"&"))


def check_id(value: str, param: str) -> None:
    """A response id as OpenAI and vLLM write them (``resp_<hex>``), bounded; else a 400."""
    if not _ID.fullmatch(value):
        raise invalid(f"Invalid '{param}': expected 1-128 letters, digits, '_' or '-'.", param)


def stores(request: ApiRequest) -> bool:
    """Whether the answer to ``request`` is stored on its endpoint (so its id must be recorded)."""
    return request.api == CREATE and (request.body.get("store") is not False or request.body.get("background") is True)


def prompt_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """``instructions`` + ``input`` as chat messages (see the module docstring)."""
    messages: list[dict[str, Any]] = []
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        messages.append({"role": "user", "content": items})
        return messages
    for item in items if isinstance(items, list) else ():
        messages.append(_item_message(item))
    return messages


def _item_message(item: dict[str, Any]) -> dict[str, Any]:
    kind = item.get("type", "message")
    if kind == "message" and "role" in item:
        content = item.get("content")
        if isinstance(content, list):
            content = [_part(part) for part in content]
        return {"role": str(item.get("role")), "content": content}
    if kind == "function_call":
        call = {"id": item.get("call_id"), "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}
    if kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else orjson.dumps(output).decode()
        return {"role": "tool", "content": text, "tool_call_id": item.get("call_id")}
    return {"role": str(kind), "content": orjson.dumps(item, option=orjson.OPT_SORT_KEYS).decode()}


def _part(part: Any) -> Any:
    """An ``input_text``/``output_text`` part as a chat text part (the same bytes are hashed)."""
    if isinstance(part, dict) and part.get("type") in ("input_text", "output_text") and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"]}
    return part


def usage_of(body: Any) -> TokenUsage | None:
    """Token counts of a response object's ``usage`` (a buffered answer); None if absent/malformed."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return None
    prompt = count(usage.get("input_tokens"))
    details = usage.get("input_tokens_details")
    cached = count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return TokenUsage(prompt, min(cached, prompt), count(usage.get("output_tokens")))


def response_id_of(body: Any) -> str | None:
    """The id of a response object (``{"object": "response", "id": ...}``), else None."""
    if isinstance(body, dict) and body.get("object") == "response" and isinstance(body.get("id"), str):
        return body["id"]
    return None


_TERMINAL = frozenset(("response.completed", "response.incomplete"))


class ResponsesStreamObserver(TypedEventObserver):
    """Watches a Responses stream (see the module docstring); ``sequence`` is the last number seen."""

    PREAMBLE = frozenset(("response.created", "response.in_progress", "response.queued",
                          "response.output_item.added", "response.content_part.added"))

    def __init__(self, clock: Any, *, collect: bool = False) -> None:
        super().__init__(clock, collect=collect)
        self.sequence = -1
        self.response: dict[str, Any] | None = None  # the terminal event's response object (for ids_to_record)
        self._skeleton: dict[str, Any] | None = None

    def _observe_typed(self, kind: str, event: dict[str, Any]) -> None:
        number = event.get("sequence_number")
        if isinstance(number, int) and not isinstance(number, bool):
            self.sequence = max(self.sequence, number)
        response = event.get("response")
        if isinstance(response, dict) and kind in ("response.created", "response.in_progress", "response.queued"):
            if isinstance(response.get("id"), str):
                self.response_id = response["id"]
            self._skeleton = {key: value for key, value in response.items() if key != "output"}
        elif kind.endswith(".delta"):
            self._output()
        elif kind in _TERMINAL or kind == "response.failed":
            self.done = True
            if isinstance(response, dict):
                self.response = response
                self.tokens = usage_of(response) or self.tokens
                if isinstance(response.get("status"), str):
                    self.finish_reasons.append(response["status"])
                if kind == "response.failed":
                    self.error = error_object(response.get("error") or {"message": "response.failed"})
        elif kind == "error":
            self.error = error_object({k: event.get(k) for k in ("message", "code", "param") if k in event})

    def error_event(self, message: str) -> bytes:
        """``response.failed`` (or ``error`` before ``response.created``), numbered after the last event."""
        text = f"Upstream endpoint failed mid-stream: {message}."
        number = self.sequence + 1
        if self._skeleton is None:
            payload = {"type": "error", "code": "upstream_error", "message": text, "param": None,
                       "sequence_number": number}
            return self._separator() + b"event: error\ndata: " + orjson.dumps(payload) + b"\n\n"
        response = {**self._skeleton, "status": "failed", "output": [],
                    "error": {"code": "server_error", "message": text}}
        payload = {"type": "response.failed", "sequence_number": number, "response": response}
        return self._separator() + b"event: response.failed\ndata: " + orjson.dumps(payload) + b"\n\n"


class ResponsesReadObserver(ResponsesStreamObserver):
    """A streamed retrieve (``GET /v1/responses/{id}?stream=true``): the events of a response
    charged at its create, so the read itself carries no usage (never an estimate either)."""

    @property
    def usage(self) -> dict[str, Any] | None:
        return {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
