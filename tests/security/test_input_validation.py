"""Issue 17, items 4 and 5 (and issue 16's last bullet): no client input makes kvgate answer 5xx.

Every field kvgate reads is type-checked when the body is parsed (400 ``invalid_request_error``
naming the field in ``param``), message shapes included, and a body nested deeper than kvgate
can re-serialize is refused with a 400. Before the fix, ``"thinking": {"type": []}`` answered
500 for tiered and context-limited models and on ``/admin/routing/explain``, a ``content`` that
was a number went to the engine, and 300 levels of nesting in ``tools``, ``tool_calls`` or any
field of a renamed model's body answered 500.

The property-based tests (hypothesis) put arbitrary JSON values at every field kvgate reads, on
the three paths that read the most (``auto`` route selection, a context-limited public model,
a model the endpoint serves under another name), through the official SDK over loopback, and
on the explain endpoint; none may answer 5xx.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway, error_shape_ok
from tests.support.security_keys import ADMIN_KEY, NEVER_EJECT, admin_headers, sdk, serve

MODELS = ("auto", "limited", "renamed")


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    started = FakeUpstream("validation").start()
    yield started
    started.stop()


@pytest.fixture(scope="module")
def gateway(fake: FakeUpstream) -> Iterator[RunningGateway]:
    config = {
        "admin": {"api_key": ADMIN_KEY},
        **NEVER_EJECT,
        "clusters": {
            "deep": {
                "tier": "reasoning", "max_context_tokens": 8000,
                "endpoints": [{"name": "deep-0", "url": fake.base_url, "model": "r1-served"}],
            },
            "quick": {
                "tier": "fast", "max_context_tokens": 4000, "thinking_switch": "enable-thinking",
                "endpoints": [{"name": "quick-0", "url": fake.base_url, "model": "q-served"}],
            },
            "plain": {"endpoints": [{"name": "plain-0", "url": fake.base_url, "model": "plain-served"}]},
        },
        "models": {"limited": {"cluster": "deep", "failover": ["quick"]}, "renamed": {"cluster": "plain"}},
    }
    with serve(config, health_checks=False) as running:
        yield running


@pytest.fixture(scope="module")
def client(gateway: RunningGateway) -> Iterator[openai.OpenAI]:
    with sdk(gateway) as opened:
        yield opened


def _base(model: str) -> dict[str, Any]:
    """A chat body holding every message shape kvgate reads."""
    return {
        "model": model,
        "max_tokens": 5,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "name": "u", "content": [{"type": "text", "text": "Prove it, step by step."}]},
            {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
    }


def _post(client: openai.OpenAI, path: str, body: Any) -> httpx.Response:
    """POST ``body`` as it is (the SDK's low-level call: no client-side transformation)."""
    try:
        return client.post(path, body=body, cast_to=httpx.Response)
    except openai.APIStatusError as error:
        return error.response


def _assert_refused(response: httpx.Response, param: str) -> None:
    assert response.status_code == 400, response.text
    payload = response.json()
    assert error_shape_ok(payload)
    assert payload["error"]["type"] == "invalid_request_error" and payload["error"]["param"] == param


@pytest.mark.parametrize("model", MODELS)
def test_a_thinking_type_that_is_not_a_string_is_a_400(client: openai.OpenAI, gateway: RunningGateway, model: str) -> None:
    body = {**_base(model), "thinking": {"type": []}}
    _assert_refused(_post(client, "/chat/completions", body), "thinking.type")
    explained = httpx.post(gateway.url + "/admin/routing/explain", json=body, headers=admin_headers(), timeout=10)
    _assert_refused(explained, "thinking.type")


@pytest.mark.parametrize(("field", "value"), [("max_tokens", -1), ("max_tokens", 0), ("max_completion_tokens", -5), ("n", 0)])
def test_a_count_below_one_is_the_gateways_400_not_the_engines(
    client: openai.OpenAI, fake: FakeUpstream, field: str, value: int
) -> None:
    seen = len(fake.requests)
    _assert_refused(_post(client, "/chat/completions", {**_base("renamed"), field: value}), field)
    assert len(fake.requests) == seen  # no engine saw it


MESSAGE_CASES = [
    ("content-number", [{"role": "user", "content": 5}], "messages[0].content"),
    ("content-object", [{"role": "user", "content": {"text": "hi"}}], "messages[0].content"),
    ("part-not-object", [{"role": "user", "content": ["hi"]}], "messages[0].content[0]"),
    ("part-type-missing", [{"role": "user", "content": [{"text": "hi"}]}], "messages[0].content[0].type"),
    ("text-part-number", [{"role": "user", "content": [{"type": "text", "text": 1}]}], "messages[0].content[0].text"),
    ("role-number", [{"role": 1, "content": "hi"}], "messages[0].role"),
    ("name-number", [{"role": "user", "content": "hi", "name": 3}], "messages[0].name"),
    ("tool-calls-object", [{"role": "assistant", "content": None, "tool_calls": {"id": 1}}], "messages[0].tool_calls"),
    ("tool-call-string", [{"role": "assistant", "content": None, "tool_calls": ["x"]}], "messages[0].tool_calls[0]"),
    ("tool-call-id-list", [{"role": "tool", "content": "ok", "tool_call_id": []}], "messages[0].tool_call_id"),
]


@pytest.mark.parametrize(("messages", "param"), [case[1:] for case in MESSAGE_CASES], ids=[case[0] for case in MESSAGE_CASES])
def test_message_shapes_are_checked_at_the_gateway(
    client: openai.OpenAI, fake: FakeUpstream, messages: list[Any], param: str
) -> None:
    before = len(fake.requests)
    _assert_refused(_post(client, "/chat/completions", {"model": "renamed", "messages": messages}), param)
    assert len(fake.requests) == before  # the engine never saw it


def _nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(
    ("where", "param"),
    [("tools", "tools"), ("tool_calls", "messages"), ("content", "messages[0].content[0]"), ("metadata", "metadata")],
)
def test_deeply_nested_bodies_are_a_400(client: openai.OpenAI, model: str, where: str, param: str) -> None:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    deep = _nested(300)
    if where == "tools":
        body["tools"] = [{"type": "function", "function": {"name": "f", "parameters": deep}}]
    elif where == "tool_calls":
        body["messages"].append({"role": "assistant", "content": None, "tool_calls": [{"id": "c", "function": deep}]})
    elif where == "content":
        body["messages"][0]["content"] = [[[[deep]]]]  # a content part must be an object: refused first
    else:
        body["metadata"] = deep  # a field kvgate does not read, re-serialized when the model is renamed
    _assert_refused(_post(client, "/chat/completions", body), param)


def test_nesting_below_the_limit_is_served_and_renamed(client: openai.OpenAI, fake: FakeUpstream) -> None:
    body = {"model": "renamed", "messages": [{"role": "user", "content": "hi"}], "metadata": _nested(100)}
    response = _post(client, "/chat/completions", body)
    assert response.status_code == 200, response.text
    assert fake.requests[-1]["body"]["model"] == "plain-served"


# -- property-based: arbitrary JSON at every field kvgate reads -------------------------------------

_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12),
    st.sampled_from(["enabled", "disabled", "high", "none", "json_object", "text", "auto", "user", "function"]),
)
JSON_VALUES = st.recursive(
    _SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=10
)

Path = tuple[str | int, ...]
TOP_LEVEL = (
    "model", "messages", "stream", "stream_options", "user", "prompt_cache_key", "cache_salt", "reasoning_effort",
    "reasoning", "chat_template_kwargs", "thinking", "max_tokens", "max_completion_tokens", "n", "response_format",
    "tools", "functions", "tool_choice", "echo", "continue_final_message", "add_generation_prompt",
)
NESTED = (
    ("reasoning", "effort"), ("reasoning", "enabled"), ("chat_template_kwargs", "enable_thinking"),
    ("chat_template_kwargs", "thinking"), ("thinking", "type"), ("response_format", "type"), ("stream_options", "include_usage"),
)
MESSAGE_PATHS: tuple[Path, ...] = (
    ("messages", 0), ("messages", 0, "role"), ("messages", 0, "content"), ("messages", 1, "content"),
    ("messages", 1, "content", 0), ("messages", 1, "content", 0, "type"), ("messages", 1, "content", 0, "text"),
    ("messages", 1, "name"), ("messages", 2, "tool_calls"), ("messages", 2, "tool_calls", 0), ("messages", 3, "tool_call_id"),
    ("messages", 2, "content"),
)
PATHS: tuple[Path, ...] = (*((name,) for name in TOP_LEVEL), *NESTED, *MESSAGE_PATHS)


def _with(body: dict[str, Any], path: Path, value: Any) -> dict[str, Any]:
    """``body`` with ``value`` at ``path`` (a missing or non-object parent becomes an object)."""
    node: Any = body
    for step in path[:-1]:
        child = node[step] if isinstance(node, list) else node.get(step)
        if not isinstance(child, (dict, list)):
            child = {}
            node[step] = child
        node = child
    node[path[-1]] = value
    return body


def _no_5xx(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        assert error_shape_ok(response.json()), response.text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=st.sampled_from(MODELS), path=st.sampled_from(PATHS), value=JSON_VALUES)
def test_no_json_value_at_a_read_field_gives_a_5xx(client: openai.OpenAI, model: str, path: Path, value: Any) -> None:
    _no_5xx(_post(client, "/chat/completions", _with(_base(model), path, value)))


COMPLETION_PATHS: tuple[Path, ...] = (("prompt",), ("echo",), ("max_tokens",), ("user",), ("stream",), ("model",))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=st.sampled_from(MODELS), path=st.sampled_from(COMPLETION_PATHS), value=JSON_VALUES)
def test_no_json_value_at_a_completion_field_gives_a_5xx(client: openai.OpenAI, model: str, path: Path, value: Any) -> None:
    body = {"model": model, "prompt": "Say hi.", "max_tokens": 5}
    _no_5xx(_post(client, "/completions", _with(body, path, value)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(model=st.sampled_from(MODELS), path=st.sampled_from(PATHS), value=JSON_VALUES)
def test_no_json_value_makes_explain_answer_5xx(gateway: RunningGateway, model: str, path: Path, value: Any) -> None:
    body = _with(_base(model), path, value)
    response = httpx.post(gateway.url + "/admin/routing/explain", json=body, headers=admin_headers(), timeout=10)
    _no_5xx(response)
