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
