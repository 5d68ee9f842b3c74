"""Limit headers over key defaults, and the thinking switches."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.errors import InvalidRequestError
from gateway.protocol.openai import Operation, parse_request
from gateway.config import KeyRouteLimits, SelectionSettings
from gateway.selection.limits import request_limits
from gateway.selection.rewrite import SWITCHES, thinking_off

DEFAULTS = KeyRouteLimits(max_ttft_ms=3000, max_cost_usd=0.5)


@pytest.mark.parametrize(
    ("headers", "defaults", "expected"),
    [
        ({}, KeyRouteLimits(), (None, None)),
        ({}, DEFAULTS, (3.0, 0.5)),
        ({"x-max-ttft-ms": "250"}, DEFAULTS, (0.25, 0.5)),
        ({"x-max-cost-usd": " 0.01 "}, DEFAULTS, (3.0, 0.01)),
        ({"x-max-ttft-ms": "1e3", "x-max-cost-usd": "2"}, KeyRouteLimits(), (1.0, 2.0)),
    ],
)
def test_request_limits(headers: dict[str, str], defaults: KeyRouteLimits, expected: tuple[Any, Any]) -> None:
    assert request_limits(headers, defaults) == expected


@pytest.mark.parametrize(
    ("header", "value"),
    [("x-max-ttft-ms", "fast"), ("x-max-ttft-ms", "0"), ("x-max-ttft-ms", "-5"), ("x-max-ttft-ms", "nan"),
     ("x-max-ttft-ms", "1e12"), ("x-max-cost-usd", "inf"), ("x-max-cost-usd", ""), ("x-max-cost-usd", "$1")],
)
def test_bad_limit_headers_are_400s_naming_the_header(header: str, value: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        request_limits({header: value}, KeyRouteLimits())
    assert caught.value.status == 400
    assert caught.value.param in ("X-Max-TTFT-Ms", "X-Max-Cost-USD")


def test_key_limits_fall_back_to_the_defaults() -> None:
    config = SelectionSettings(defaults=KeyRouteLimits(max_ttft_ms=1), keys={"team-a": DEFAULTS})
    assert config.limits_for("team-a") == DEFAULTS
    assert config.limits_for("other").max_ttft_ms == 1


def _request(**body: Any) -> Any:
    return parse_request(Operation.CHAT, orjson.dumps({"model": "auto", "messages": [{"role": "user", "content": "x"}], **body}))


@pytest.mark.parametrize(
    ("switch", "body", "expected"),
    [
        ("none", {"reasoning_effort": "high"}, {"reasoning_effort": "high"}),
        ("enable-thinking", {}, {"chat_template_kwargs": {"enable_thinking": False}}),
        ("enable-thinking", {"chat_template_kwargs": {"enable_thinking": True, "x": 1}},
         {"chat_template_kwargs": {"enable_thinking": False, "x": 1}}),
        ("effort-none", {"reasoning_effort": "high"}, {"reasoning_effort": "none"}),
        ("effort-low", {}, {"reasoning_effort": "low"}),
    ],
)
def test_thinking_off(switch: str, body: dict[str, Any], expected: dict[str, Any]) -> None:
    request = _request(**body, temperature=0.3)
    changed = thinking_off(request, switch)
    sent = orjson.loads(changed.raw)
    assert {k: v for k, v in sent.items() if k not in ("model", "messages", "temperature")} == expected
    assert sent["temperature"] == 0.3 and changed.body == sent
    if switch == "none":
        assert changed is request


def test_every_configurable_switch_has_a_rewrite() -> None:
    from typing import get_args

    from gateway.config import ThinkingSwitch

    assert set(get_args(ThinkingSwitch)) == set(SWITCHES)
