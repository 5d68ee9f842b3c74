"""The official openai SDK against kvgate: bad fields on the chat and completions doors are OpenAI 400s.

Found by outside suites built from public bug reports of other gateways: ``stream_options`` with
``include_usage: "maybe"`` (or without ``stream: true``) was forwarded, an integer beyond 64 bits
(``max_tokens: 10**30``) was called "not an integer" instead of out of range, and a text
completion too long for its cluster blamed ``messages``. Each refusal is a 400
``invalid_request_error`` whose ``param`` names the field, answered before any endpoint is called.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.compat.conftest import CLIENT_KEY
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway, error_shape_ok

MESSAGES = [{"role": "user", "content": "hi"}]
CHAT, TEXT = "chat", "completions"

# (id, door, fields, param, code)
REFUSED = [
    ("chat-include-usage-string", CHAT, {"stream": True, "stream_options": {"include_usage": "maybe"}},
     "stream_options.include_usage", None),
    ("text-include-usage-string", TEXT, {"stream": True, "stream_options": {"include_usage": "maybe"}},
     "stream_options.include_usage", None),
    ("chat-stream-options-without-stream", CHAT, {"stream_options": {"include_usage": True}}, "stream_options", None),
    ("text-stream-options-stream-false", TEXT, {"stream": False, "stream_options": {"include_usage": True}},
     "stream_options", None),
    ("chat-max-tokens-huge", CHAT, {"max_tokens": 10**30}, "max_tokens", "integer_above_max_value"),
    ("text-max-tokens-huge", TEXT, {"max_tokens": 10**30}, "max_tokens", "integer_above_max_value"),
    ("chat-max-completion-tokens-huge", CHAT, {"max_completion_tokens": 10**30}, "max_completion_tokens",
     "integer_above_max_value"),
    ("chat-max-tokens-negative", CHAT, {"max_tokens": -1}, "max_tokens", "integer_below_min_value"),
    ("text-n-huge", TEXT, {"n": 10**30}, "n", "integer_above_max_value"),
    ("chat-n-true", CHAT, {"n": True}, "n", None),
    ("chat-n-decimal", CHAT, {"n": 2.5}, "n", None),
    ("chat-seed-huge", CHAT, {"seed": 10**30}, "seed", "integer_above_max_value"),
    ("text-seed-bool", TEXT, {"seed": True}, "seed", None),
    ("chat-top-logprobs-negative", CHAT, {"logprobs": True, "top_logprobs": -1}, "top_logprobs",
     "integer_below_min_value"),
    ("chat-logprobs-integer", CHAT, {"logprobs": 2}, "logprobs", None),
    ("text-logprobs-huge", TEXT, {"logprobs": 10**30}, "logprobs", "integer_above_max_value"),
    ("text-logprobs-negative", TEXT, {"logprobs": -1}, "logprobs", "integer_below_min_value"),
]


def _create(client: openai.OpenAI, door: str, model: str, **fields: Any) -> Any:
    if door == CHAT:
        return client.chat.completions.create(model=model, messages=MESSAGES, **fields)  # type: ignore[call-overload]
    return client.completions.create(model=model, prompt="say hi", **fields)  # type: ignore[call-overload]


def _refused(caught: pytest.ExceptionInfo[openai.BadRequestError], param: str, code: str | None) -> str:
    error = caught.value
    assert error.status_code == 400
    assert error_shape_ok(error.response.json()), error.response.text
    assert (error.type, error.param, error.code) == ("invalid_request_error", param, code)
    return error.response.json()["error"]["message"]


@pytest.mark.parametrize(("door", "fields", "param", "code"), [case[1:] for case in REFUSED], ids=[case[0] for case in REFUSED])
def test_a_bad_field_is_a_400_naming_it_before_any_endpoint(
    client: openai.OpenAI, fake: FakeUpstream, door: str, fields: dict[str, Any], param: str, code: str | None
) -> None:
    seen = len(fake.requests)
    with pytest.raises(openai.BadRequestError) as caught:
        _create(client, door, "qwen-fast", **fields)
    message = _refused(caught, param, code)
    if code == "integer_above_max_value":
        assert "integer above maximum value" in message and "expected an integer" not in message
    if param == "stream_options":
        assert message == "The 'stream_options' parameter is only allowed when 'stream' is enabled."
    assert len(fake.requests) == seen


@pytest.mark.parametrize(
    ("door", "fields"),
    [
        (CHAT, {"stream_options": None}),
        (TEXT, {"max_tokens": 5.0, "seed": -3, "logprobs": 2}),
        (CHAT, {"n": 1.0, "logprobs": True, "top_logprobs": 0, "max_completion_tokens": 2147483647}),
    ],
    ids=["null-stream-options", "text-integral-numbers", "chat-bounds"],
)
def test_well_typed_fields_pass_untouched(client: openai.OpenAI, fake: FakeUpstream, door: str, fields: dict[str, Any]) -> None:
    _create(client, door, "deepseek-r1", **fields)  # served under its own name: the client's bytes go out
    assert {name: fake.last["body"][name] for name in fields} == fields


@pytest.fixture(scope="module")
def limited(fake: FakeUpstream) -> Iterator[RunningGateway]:
    running = RunningGateway(
        {
            "circuit": {"consecutive_failures": 1_000_000, "min_requests": 1_000_000},
            "clusters": {"small": {"max_context_tokens": 100, "endpoints": [{"name": "small-0", "url": fake.base_url, "model": "tiny"}]}},
            "models": {"tiny": {"cluster": "small"}},
        }
    ).start()
    yield running
    running.stop()


@pytest.mark.parametrize(("door", "param"), [(TEXT, "prompt"), (CHAT, "messages")])
def test_a_prompt_too_long_names_the_field_holding_it(limited: RunningGateway, fake: FakeUpstream, door: str, param: str) -> None:
    seen = len(fake.requests)
    with openai.OpenAI(base_url=limited.base_url, api_key=CLIENT_KEY, max_retries=0) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            if door == TEXT:
                client.completions.create(model="tiny", prompt="word " * 2000)
            else:
                client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "word " * 2000}])
    message = _refused(caught, param, "context_length_exceeded")
    assert f"in the {param}" in message
    assert len(fake.requests) == seen
