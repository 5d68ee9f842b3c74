"""The type rules of every request field kvgate reads, checked once at parse time.

kvgate reads a few fields of an OpenAI request to route, hash, rewrite and observe it
(``gateway/protocol/openai.py``, ``selection/signals.py``, ``selection/prompt.py``,
``prefix/hashing.py``, ``continuation.py``). Each of them is checked here, so a wrong type is
a 400 ``invalid_request_error`` whose ``param`` names the field (``thinking.type``,
``messages[2].content``), never a 500 deeper in the gateway or an engine's 5xx that counts
against an endpoint. ``null`` is accepted wherever the field is optional (it reads as absent).
Fields kvgate does not read are not checked: the endpoint judges them; the integer fields of
:data:`INTEGER_RANGE` (``seed``, ``top_logprobs``, ``logprobs`` too) are the exception.

Integers, as OpenAI has them: a boolean is not an integer; an integral number (``5.0``) is one
(JSON Schema's and pydantic's rule, vLLM's too) and reads as the int ``5`` in the parsed body
(the original bytes still go out); ``5.5`` is refused. Each integer field has a range
(:data:`INTEGER_RANGE`): below it is ``integer_below_min_value``, above it
``integer_above_max_value``, as OpenAI answers. orjson parses an integer beyond 64 bits (``10**30``)
as a float, so such a value is refused as out of range, not as "not an integer". The ranges are
what an engine can represent (a 32-bit count, a 64-bit seed), not OpenAI's per-model limits
(``n`` <= 128, ``top_logprobs`` <= 20): the endpoint judges those against its own configuration.
``stream_options`` (an object whose ``include_usage`` is a boolean) is only allowed with
``"stream": true`` (OpenAI's and vLLM's rule).

Message shapes (chat), as the OpenAI API defines them: ``messages`` is a non-empty array of
objects with a string ``role``; ``content`` is a string, null, or an array of content parts
(objects with a string ``type``; a ``text`` part has a string ``text``); ``name`` and
``tool_call_id`` are strings; ``tool_calls`` is an array of objects.

Nesting: orjson parses 1,024 levels of JSON but writes at most 254, and kvgate re-serializes
parts of a body (prefix hashing of ``tools`` and ``tool_calls``, a renamed model, a
continuation). A body nested deeper than :data:`MAX_JSON_DEPTH` levels is refused (400,
``param`` = the top-level field holding the deepest value). The check first looks for enough
opening brackets to reach the limit (:func:`brackets_reach`: ``bytes.find``, which is ``memchr``,
about 0.05 ms per MiB, and stops at ``limit + 1`` of them; counting them all with
``bytes.count`` cost 1.7 ms per MiB) and walks the parsed body only when there are.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import InvalidRequestError, UnsupportedMediaTypeError

MAX_JSON_DEPTH = 128
"""Deepest nesting of objects and arrays accepted in a request body (the body itself is level 1)."""

_BOOL = (bool,)
_STR = (str,)
_OBJECT = (dict,)
_ARRAY = (list,)
_INT = (int,)

# top-level field -> (accepted types, what to call them); ``int`` means an integer, not a bool
TOP_LEVEL: dict[str, tuple[tuple[type, ...], str]] = {
    "stream": (_BOOL, "a boolean"),
    "stream_options": (_OBJECT, "an object"),
    "user": (_STR, "a string"),
    "prompt_cache_key": (_STR, "a string"),
    "cache_salt": (_STR, "a string"),
    "reasoning_effort": (_STR, "a string"),
    "reasoning": (_OBJECT, "an object"),
    "chat_template_kwargs": (_OBJECT, "an object"),
    "thinking": (_OBJECT, "an object"),
    "max_tokens": (_INT, "an integer"),
    "max_completion_tokens": (_INT, "an integer"),
    "n": (_INT, "an integer"),
    "seed": (_INT, "an integer"),
    "top_logprobs": (_INT, "an integer"),
    "response_format": (_OBJECT, "an object"),
    "tools": (_ARRAY, "an array of objects"),
    "functions": (_ARRAY, "an array of objects"),
    "tool_choice": ((str, dict), "a string or an object"),
    "echo": (_BOOL, "a boolean"),
    "continue_final_message": (_BOOL, "a boolean"),
    "add_generation_prompt": (_BOOL, "a boolean"),
}
"""Top-level fields kvgate reads besides ``model``, ``messages`` and ``prompt``."""

CHAT_FIELDS = {**TOP_LEVEL, "logprobs": (_BOOL, "a boolean")}
"""The top-level fields checked on a chat request (its ``logprobs`` is a switch)."""
COMPLETION_FIELDS = {**TOP_LEVEL, "logprobs": (_INT, "an integer")}
"""The top-level fields checked on a text completion request (its ``logprobs`` is a count)."""

INT32_MAX = 2**31 - 1
INTEGER_RANGE: dict[str, tuple[int, int]] = {
    "max_tokens": (1, INT32_MAX),
    "max_completion_tokens": (1, INT32_MAX),
    "n": (1, INT32_MAX),
    "seed": (-(2**63), 2**63 - 1),
    "top_logprobs": (0, INT32_MAX),
    "logprobs": (0, INT32_MAX),
}
"""Integer field -> (smallest, largest) accepted value (the module docstring says why these)."""

NESTED: dict[str, dict[str, tuple[tuple[type, ...], str]]] = {
    "reasoning": {"effort": (_STR, "a string"), "enabled": (_BOOL, "a boolean")},
    "chat_template_kwargs": {"enable_thinking": (_BOOL, "a boolean"), "thinking": (_BOOL, "a boolean")},
    "thinking": {"type": (_STR, "a string")},
    "response_format": {"type": (_STR, "a string")},
}
"""Fields kvgate reads inside the top-level objects above."""

MESSAGE_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "name": (_STR, "a string"),
    "tool_call_id": (_STR, "a string"),
    "tool_calls": (_ARRAY, "an array of objects"),
}


def invalid_type(param: str, what: str, value: Any) -> InvalidRequestError:
    """The 400 for ``param`` holding ``value`` where ``what`` was expected."""
    return InvalidRequestError(f"Invalid type for '{param}': expected {what}, got {_kind(value)}.", param=param)


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "an integer",
             float: "a decimal number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _is(value: Any, kinds: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in kinds
    return isinstance(value, kinds)


def check_field(container: dict[str, Any], name: str, rule: tuple[tuple[type, ...], str], param: str) -> None:
    """Raise the 400 if ``container[name]`` is present, not null and not of ``rule``'s types."""
    value = container.get(name)
    if value is not None and not _is(value, rule[0]):
        raise invalid_type(param, rule[1], value)


def _objects(items: list[Any], param: str) -> None:
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise invalid_type(f"{param}[{index}]", "an object", item)


def check_integer(name: str, value: Any, bounds: tuple[int, int] | None = None) -> int:
    """``value`` of the integer field ``name`` as an int; the 400 unless it is an integer (or an
    integral number) within ``bounds`` (smallest, largest), by default :data:`INTEGER_RANGE`'s
    for ``name`` (module docstring)."""
    number = value
    if type(value) is not int:
        if type(value) is not float or not value.is_integer():
            raise invalid_type(name, "an integer", value)
        number = int(value)
    low, high = INTEGER_RANGE[name] if bounds is None else bounds
    if number < low:
        raise InvalidRequestError(
            f"Invalid '{name}': integer below minimum value. Expected a value >= {low}, but got {value} instead.",
            param=name, code="integer_below_min_value")
    if number > high:
        raise InvalidRequestError(
            f"Invalid '{name}': integer above maximum value. Expected a value <= {high}, but got {value} instead.",
            param=name, code="integer_above_max_value")
    return number


def check_fields(body: dict[str, Any], fields: dict[str, tuple[tuple[type, ...], str]] = CHAT_FIELDS) -> None:
    """Type-check the optional top-level ``fields`` kvgate reads and the fields it reads inside them
    (an integral number in an integer field is stored back as an int)."""
    for name, value in body.items():  # a body has few fields: walk them, not the table
        rule = fields.get(name)
        if rule is None or value is None:
            continue
        if rule[0] is _INT:
            if type(value) is int:  # the common case, inline
                low, high = INTEGER_RANGE[name]
                if low <= value <= high:
                    continue
            body[name] = check_integer(name, value)  # raises, or an integral float as an int (same key: safe)
            continue
        if not _is(value, rule[0]):
            raise invalid_type(name, rule[1], value)
        if name == "stream_options":
            _check_stream_options(value, body)
        fields_in = NESTED.get(name)
        if fields_in is not None:
            for field, inner in fields_in.items():
                check_field(value, field, inner, f"{name}.{field}")
        elif name in ("tools", "functions"):
            _objects(value, name)


def _check_stream_options(options: dict[str, Any], body: dict[str, Any]) -> None:
    if body.get("stream") is not True:
        raise InvalidRequestError(
            "The 'stream_options' parameter is only allowed when 'stream' is enabled.", param="stream_options")
    check_field(options, "include_usage", (_BOOL, "a boolean"), "stream_options.include_usage")


def _check_content(content: Any, param: str) -> None:
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise invalid_type(param, "a string, null or an array of content parts", content)
    for index, part in enumerate(content):
        where = f"{param}[{index}]"
        if not isinstance(part, dict):
            raise invalid_type(where, "a content part object", part)
        kind = part.get("type")
        if not isinstance(kind, str):
            raise invalid_type(f"{where}.type", "a string", kind)
        if kind == "text" and not isinstance(part.get("text"), str):
            raise invalid_type(f"{where}.text", "a string", part.get("text"))


def check_messages(messages: Any) -> None:
    """Chat ``messages`` (see the module docstring for the shapes)."""
    if not isinstance(messages, list):
        raise InvalidRequestError("Invalid type for 'messages': expected an array of objects.", param="messages")
    if not messages:
        raise InvalidRequestError("'messages' must contain at least one message.", param="messages")
    for index, message in enumerate(messages):
        param = f"messages[{index}]"
        if not isinstance(message, dict):
            raise InvalidRequestError(f"Invalid type for '{param}': expected an object.", param=param)
        role = message.get("role")
        if role is None:
            raise InvalidRequestError(f"Missing required parameter: '{param}.role'.", param=f"{param}.role")
        if not isinstance(role, str):
            raise invalid_type(f"{param}.role", "a string", role)
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            _check_content(content, f"{param}.content")
        if len(message) > 2:  # more than role and content
            for name, rule in MESSAGE_FIELDS.items():
                check_field(message, name, rule, f"{param}.{name}")
            if isinstance(message.get("tool_calls"), list):
                _objects(message["tool_calls"], f"{param}.tool_calls")


def check_depth(raw: bytes, body: dict[str, Any], limit: int = MAX_JSON_DEPTH) -> None:
    """Raise the 400 if ``body`` (parsed from ``raw``) nests deeper than ``limit`` levels."""
    if not brackets_reach(raw, limit + 1):
        return  # not enough brackets to reach the limit (strings may hold some: an over-count)
    for name, value in body.items():
        if isinstance(value, (dict, list)) and _deeper_than(value, limit - 1):
            raise InvalidRequestError(
                f"The request body nests JSON objects and arrays deeper than {limit} levels (in '{name}').", param=name
            )


_COUNT_BYTES = 16_384


def brackets_reach(raw: bytes, wanted: int) -> bool:
    """Whether ``raw`` holds at least ``wanted`` opening brackets (``[`` and ``{`` together).

    Same answer as ``raw.count(b"[") + raw.count(b"{") >= wanted`` at ``memchr`` speed: each
    bracket kind is searched with ``bytes.find`` and the search stops once ``wanted`` are found,
    so a body with few brackets costs two fast scans and one with many about ``wanted`` finds.
    A body of at most 16 KiB is counted with ``bytes.count`` (cheaper than a call per bracket there).
    """
    if len(raw) <= _COUNT_BYTES:  # small bodies: two counts cost less than a find per bracket
        return raw.count(b"[") + raw.count(b"{") >= wanted
    found = 0
    for bracket in (b"[", b"{"):
        find = raw.find
        at = find(bracket)
        while at >= 0:
            found += 1
            if found >= wanted:
                return True
            at = find(bracket, at + 1)
    return False


def _deeper_than(root: dict[str, Any] | list[Any], limit: int) -> bool:
    """Whether ``root`` (level 1) holds containers more than ``limit`` levels deep; iterative."""
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        value, level = stack.pop()
        if level > limit:
            return True
        children = value.values() if isinstance(value, dict) else value
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return False


def check_content_type(value: str | None) -> None:
    """Raise UnsupportedMediaTypeError (415) unless ``value`` is ``application/json``, parameters allowed.

    ``value``: the request's ``Content-Type`` header, or None when absent. An absent header is
    accepted (the body is then parsed as JSON, as FastAPI and vLLM do); any other media type
    (``text/plain``, ``application/x-www-form-urlencoded``, ...) is refused before it is parsed.
    """
    if value is None:
        return
    media_type = value.split(";", 1)[0].strip().lower()
    if media_type != "application/json":
        shown = media_type[:64] or "(empty)"
        raise UnsupportedMediaTypeError(
            f"Content-Type must be application/json, got {shown!r}.", param="Content-Type"
        )


def check_content_encoding(value: str | None) -> None:
    """Raise UnsupportedMediaTypeError (415, ``Accept-Encoding: identity``, RFC 7694) unless the
    request body is sent as it is: no ``Content-Encoding`` header, or only ``identity``.

    kvgate does not decompress request bodies (a gzip body read as JSON was a misleading 400, and
    a body declared ``br`` but sent plain was accepted as if it were plain).
    """
    if value is None:
        return
    codings = [coding.strip().lower() for coding in value.split(",")]
    if all(coding in ("", "identity") for coding in codings):
        return
    shown = value.strip()[:64]
    raise UnsupportedMediaTypeError(
        f"Content-Encoding {shown!r} is not supported: send the request body uncompressed.",
        param="Content-Encoding", headers={"Accept-Encoding": "identity"},
    )
