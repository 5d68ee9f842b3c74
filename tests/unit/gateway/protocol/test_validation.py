"""The type rules of the fields kvgate reads (``gateway/protocol/validation.py``), table-driven."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest

from gateway.errors import InvalidRequestError
from gateway.protocol.openai import Operation, parse_request
from gateway.protocol.validation import MAX_JSON_DEPTH, check_depth

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

REFUSED = [
    ("thinking-type-list", {"thinking": {"type": []}}, "thinking.type"),
    ("reasoning-effort-number", {"reasoning_effort": 3}, "reasoning_effort"),
    ("reasoning-enabled-string", {"reasoning": {"enabled": "yes"}}, "reasoning.enabled"),
    ("enable-thinking-string", {"chat_template_kwargs": {"enable_thinking": "false"}}, "chat_template_kwargs.enable_thinking"),
    ("max-tokens-bool", {"max_tokens": True}, "max_tokens"),
    ("max-tokens-float", {"max_tokens": 1.5}, "max_tokens"),
    ("n-string", {"n": "2"}, "n"),
    ("response-format-type-object", {"response_format": {"type": {}}}, "response_format.type"),
    ("tools-object", {"tools": {"type": "function"}}, "tools"),
    ("tool-not-object", {"tools": ["f"]}, "tools[0]"),
    ("tool-choice-number", {"tool_choice": 1}, "tool_choice"),
    ("cache-salt-number", {"cache_salt": 1}, "cache_salt"),
    ("stream-string", {"stream": "true"}, "stream"),
]


@pytest.mark.parametrize(("fields", "param"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_a_read_field_of_the_wrong_type_names_itself(fields: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        parse_request(Operation.CHAT, orjson.dumps({**CHAT, **fields}))
    assert refused.value.status == 400 and refused.value.param == param


ACCEPTED = [
    ("nulls", {"thinking": None, "max_tokens": None, "tools": None, "user": None}),
    ("thinking", {"thinking": {"type": "enabled", "budget_tokens": 100}}),
    ("unread-fields-untouched", {"temperature": "hot", "metadata": {"a": [1, {"b": None}]}}),
    ("tool-choice-object", {"tool_choice": {"type": "function", "function": {"name": "f"}}}),
]


@pytest.mark.parametrize("fields", [case[1] for case in ACCEPTED], ids=[case[0] for case in ACCEPTED])
def test_well_typed_and_unread_fields_pass(fields: dict[str, Any]) -> None:
    assert parse_request(Operation.CHAT, orjson.dumps({**CHAT, **fields})).model == "m"


def _nested(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(("levels", "refused"), [(MAX_JSON_DEPTH - 1, False), (MAX_JSON_DEPTH, True), (300, True)])
def test_the_depth_limit_counts_the_body_as_level_one(levels: int, refused: bool) -> None:
    body = {"metadata": _nested(levels)}  # body (1) + `levels` arrays
    raw = json.dumps(body).encode()  # orjson itself writes at most 254 levels
    if refused:
        with pytest.raises(InvalidRequestError) as caught:
            check_depth(raw, body)
        assert caught.value.param == "metadata"
    else:
        check_depth(raw, body)


def test_brackets_inside_strings_only_make_the_walk_run() -> None:
    body = {"messages": [{"role": "user", "content": "[" * 1000}]}
    check_depth(orjson.dumps(body), body)  # many brackets, little depth: accepted


TEXT = {"model": "m", "prompt": "hi"}

# (id, operation, fields, param, code): every refusal is a 400 invalid_request_error naming the field
INTEGERS_REFUSED = [
    ("max-tokens-huge", Operation.CHAT, {"max_tokens": 10**30}, "max_tokens", "integer_above_max_value"),
    ("max-tokens-u64", Operation.COMPLETION, {"max_tokens": 2**64 - 1}, "max_tokens", "integer_above_max_value"),
    ("max-tokens-above-int32", Operation.CHAT, {"max_tokens": 2**31}, "max_tokens", "integer_above_max_value"),
    ("max-tokens-zero", Operation.COMPLETION, {"max_tokens": 0}, "max_tokens", "integer_below_min_value"),
    ("max-tokens-decimal", Operation.COMPLETION, {"max_tokens": 5.5}, "max_tokens", None),
    ("max-completion-tokens-huge", Operation.CHAT, {"max_completion_tokens": 10**30}, "max_completion_tokens",
     "integer_above_max_value"),
    ("max-completion-tokens-negative", Operation.CHAT, {"max_completion_tokens": -1}, "max_completion_tokens",
     "integer_below_min_value"),
    ("n-huge", Operation.COMPLETION, {"n": 10**30}, "n", "integer_above_max_value"),
    ("n-zero-float", Operation.CHAT, {"n": 0.0}, "n", "integer_below_min_value"),
    ("n-true", Operation.CHAT, {"n": True}, "n", None),
    ("seed-above-int64", Operation.CHAT, {"seed": 2**63}, "seed", "integer_above_max_value"),
    ("seed-below-int64", Operation.COMPLETION, {"seed": -(2**64)}, "seed", "integer_below_min_value"),
    ("seed-huge", Operation.CHAT, {"seed": 10**30}, "seed", "integer_above_max_value"),
    ("seed-decimal", Operation.CHAT, {"seed": 1.5}, "seed", None),
    ("seed-string", Operation.CHAT, {"seed": "1"}, "seed", None),
    ("seed-false", Operation.COMPLETION, {"seed": False}, "seed", None),
    ("top-logprobs-negative", Operation.CHAT, {"logprobs": True, "top_logprobs": -1}, "top_logprobs",
     "integer_below_min_value"),
    ("top-logprobs-huge", Operation.CHAT, {"logprobs": True, "top_logprobs": 10**30}, "top_logprobs",
     "integer_above_max_value"),
    ("chat-logprobs-integer", Operation.CHAT, {"logprobs": 3}, "logprobs", None),
    ("completion-logprobs-true", Operation.COMPLETION, {"logprobs": True}, "logprobs", None),
    ("completion-logprobs-negative", Operation.COMPLETION, {"logprobs": -1}, "logprobs", "integer_below_min_value"),
    ("completion-logprobs-huge", Operation.COMPLETION, {"logprobs": 10**30}, "logprobs", "integer_above_max_value"),
]


@pytest.mark.parametrize(("operation", "fields", "param", "code"), [case[1:] for case in INTEGERS_REFUSED],
                         ids=[case[0] for case in INTEGERS_REFUSED])
def test_integer_fields_are_integers_in_range(operation: Operation, fields: dict[str, Any], param: str, code: str | None) -> None:
    base = CHAT if operation is Operation.CHAT else TEXT
    with pytest.raises(InvalidRequestError) as refused:
        parse_request(operation, json.dumps({**base, **fields}).encode())  # json: orjson cannot write 10**30
    error = refused.value
    assert (error.status, error.type, error.param, error.code) == (400, "invalid_request_error", param, code)
    if code == "integer_above_max_value":
        assert "integer above maximum value. Expected a value <= " in error.message
    elif code is None:
        assert error.message.startswith(f"Invalid type for '{param}': expected an integer") or "boolean" in error.message


def test_a_huge_integer_is_out_of_range_not_a_wrong_type() -> None:
    raw = b'{"model": "m", "prompt": "x", "max_tokens": 1000000000000000000000000000000}'
    with pytest.raises(InvalidRequestError) as refused:
        parse_request(Operation.COMPLETION, raw)
    assert refused.value.param == "max_tokens"
    assert refused.value.message == (
        "Invalid 'max_tokens': integer above maximum value. Expected a value <= 2147483647, but got 1e+30 instead."
    )


def test_integral_numbers_and_bounds_are_integers() -> None:
    raw = (b'{"model": "m", "messages": [{"role": "user"}], "max_tokens": 7.0, "n": 2147483647, "seed": -5,'
           b' "max_completion_tokens": 1, "logprobs": false, "top_logprobs": 0}')
    request = parse_request(Operation.CHAT, raw)
    assert request.body["max_tokens"] == 7 and type(request.body["max_tokens"]) is int  # what kvgate reads
    assert request.body_for("m") is raw  # the client's bytes still go out
    text = parse_request(Operation.COMPLETION, b'{"model": "m", "prompt": "x", "logprobs": 5, "seed": -9223372036854775808}')
    assert text.body["logprobs"] == 5


STREAM_OPTIONS_REFUSED = [
    ("include-usage-string", {"stream": True, "stream_options": {"include_usage": "maybe"}}, "stream_options.include_usage"),
    ("include-usage-int", {"stream": True, "stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
    ("stream-options-string", {"stream": True, "stream_options": "usage"}, "stream_options"),
    ("without-stream", {"stream_options": {"include_usage": True}}, "stream_options"),
    ("stream-false", {"stream": False, "stream_options": {"include_usage": True}}, "stream_options"),
    ("stream-null", {"stream": None, "stream_options": {}}, "stream_options"),
]


@pytest.mark.parametrize("operation", [Operation.CHAT, Operation.COMPLETION])
@pytest.mark.parametrize(("fields", "param"), [case[1:] for case in STREAM_OPTIONS_REFUSED],
                         ids=[case[0] for case in STREAM_OPTIONS_REFUSED])
def test_stream_options_is_an_object_of_booleans_and_needs_stream(operation: Operation, fields: dict[str, Any], param: str) -> None:
    base = CHAT if operation is Operation.CHAT else TEXT
    with pytest.raises(InvalidRequestError) as refused:
        parse_request(operation, orjson.dumps({**base, **fields}))
    error = refused.value
    assert (error.status, error.type, error.param) == (400, "invalid_request_error", param)
    if fields.get("stream") is not True:
        assert error.message == "The 'stream_options' parameter is only allowed when 'stream' is enabled."


@pytest.mark.parametrize("fields", [{"stream_options": None}, {"stream": False, "stream_options": None},
                                    {"stream": True, "stream_options": {"include_usage": None}},
                                    {"stream": True, "stream_options": {"include_usage": False, "continuous_usage_stats": True}}])
def test_null_stream_options_and_boolean_usage_pass(fields: dict[str, Any]) -> None:
    assert parse_request(Operation.COMPLETION, orjson.dumps({**TEXT, **fields})).model == "m"
