"""The official openai SDK against kvgate: requests and answers pass through untouched."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import orjson
import pytest

from tests.support.fake_upstream import INBAND_ERROR, KV_TRANSFER_PARAMS, TOOL_CALL, USAGE, FakeUpstream
from tests.support.gateway import RunningGateway, sse_data
from tests.support.threads import wait_until

MESSAGES = [{"role": "user", "content": "hi"}]


# --- the basics --------------------------------------------------------------------------------


def test_sync_chat(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="qwen-fast", messages=MESSAGES)
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.content == "echo from c"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens == 10
    assert completion._request_id  # the SDK reads kvgate's x-request-id


async def test_async_chat(gateway: RunningGateway) -> None:
    async with openai.AsyncOpenAI(base_url=gateway.base_url, api_key="sk-async", max_retries=0) as aclient:
        completion = await aclient.chat.completions.create(model="fast-alias", messages=MESSAGES)
        assert completion.choices[0].message.content == "echo from c"
        stream = await aclient.chat.completions.create(model="r1", messages=MESSAGES, stream=True)
        async with stream:
            text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices])
        assert text == "Hello from c"


def test_streaming_chat_with_usage(client: openai.OpenAI, gateway: RunningGateway) -> None:
    cached = gateway.metric("kvgate_tokens_total", cluster="fast", kind="cached")
    with client.chat.completions.create(
        model="qwen-fast", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    ) as stream:
        chunks = list(stream)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert text == "Hello from c"
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    usage = chunks[-1].usage
    assert chunks[-1].choices == []
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (7, 3, 10)
    assert usage.prompt_tokens_details is not None and usage.prompt_tokens_details.cached_tokens == 4
    assert wait_until(lambda: gateway.metric("kvgate_tokens_total", cluster="fast", kind="cached") == cached + 4)


def test_text_completion(client: openai.OpenAI) -> None:
    completion = client.completions.create(model="qwen-fast", prompt="say hi")
    assert completion.object == "text_completion"
    assert completion.choices[0].text == "echo from c"
    assert completion.usage is not None and completion.usage.prompt_tokens == 7


def test_text_completion_streaming(client: openai.OpenAI) -> None:
    with client.completions.create(
        model="deepseek-r1", prompt=["say", "hi"], stream=True, stream_options={"include_usage": True}
    ) as stream:
        chunks = list(stream)
    assert "".join(chunk.choices[0].text for chunk in chunks if chunk.choices) == "Hello from c"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3


def test_models_list(client: openai.OpenAI) -> None:
    models = list(client.models.list())
    assert [model.id for model in models] == ["qwen-fast", "fast-alias", "deepseek-r1", "r1", "fast", "reasoning"]
    assert {model.object for model in models} == {"model"}
    assert {model.owned_by for model in models} == {"kvgate"}
    assert all(isinstance(model.created, int) for model in models)


def test_route_headers_through_the_sdk(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="r1", messages=MESSAGES)
    assert raw.headers["x-kvgate-cluster"] == "reasoning"
    assert raw.headers["x-kvgate-endpoint"] == "reason-c"
    assert raw.parse()._request_id == raw.headers["x-request-id"]


# --- requests pass through ---------------------------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]

EVERY_FIELD: dict[str, Any] = {
    "messages": [{"role": "system", "content": "Be brief. ünïcödé ✓"}, {"role": "user", "content": "Weather in Paris?"}],
    "tools": TOOLS,
    "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
    "response_format": {"type": "json_schema", "json_schema": {"name": "weather", "schema": {"type": "object"}}},
    "n": 2,
    "logprobs": True,
    "top_logprobs": 3,
    "seed": 1234,
    "temperature": 0.25,
    "max_completion_tokens": 64,
    "stop": ["\n\n"],
    "reasoning_effort": "high",
    "prompt_cache_key": "tenant-42",
    "user": "user-7",
    "extra_body": {"top_k": 20, "chat_template_kwargs": {"enable_thinking": False}, "repetition_penalty": 1.05},
}


def _echo(completion: Any) -> bytes:
    extra = completion.model_extra or {}
    return str(extra["echo"]).encode()


def test_request_bytes_are_untouched_when_the_served_name_matches(client: openai.OpenAI, sent: list[bytes]) -> None:
    completion = client.chat.completions.create(model="deepseek-r1", **EVERY_FIELD)
    assert _echo(completion) == sent[-1]
    forwarded = orjson.loads(_echo(completion))
    for field in ("tools", "tool_choice", "response_format", "n", "logprobs", "seed", "reasoning_effort", "prompt_cache_key", "top_k", "chat_template_kwargs"):
        assert field in forwarded, field


def test_streaming_request_bytes_are_untouched(client: openai.OpenAI, fake: FakeUpstream, sent: list[bytes]) -> None:
    with client.chat.completions.create(
        model="deepseek-r1", stream=True, stream_options={"include_usage": True}, **EVERY_FIELD
    ) as stream:
        list(stream)
    assert fake.last["raw"] == sent[-1]
    assert fake.last["body"]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(("model", "served"), [("qwen-fast", "qwen-served"), ("fast-alias", "qwen-served"), ("r1", "deepseek-r1"), ("reasoning", "deepseek-r1")])
def test_request_is_reserialized_only_to_rename_the_model(
    client: openai.OpenAI, sent: list[bytes], model: str, served: str
) -> None:
    completion = client.chat.completions.create(model=model, **EVERY_FIELD)
    original = orjson.loads(sent[-1])
    forwarded = orjson.loads(_echo(completion))
    assert forwarded == {**original, "model": served}
    assert list(forwarded) == list(original)  # same fields, same order


def test_raw_request_bytes_are_forwarded_as_sent(gateway: RunningGateway, fake: FakeUpstream, http: httpx.Client) -> None:
    # Odd but valid JSON: spacing, escapes, key order and number spellings must survive.
    raw = b'{ "messages" : [ {"content": "caf\\u00e9 \\ud83d\\ude00", "role": "user"} ],\n "model": "deepseek-r1", "temperature": 1.0E0, "top_p": 0.10, "seed": 9007199254740993 }'
    response = http.post(gateway.base_url + "/chat/completions", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    assert fake.last["raw"] == raw
    assert response.json()["echo"].encode() == raw


def test_completion_request_fields_pass_through(client: openai.OpenAI, sent: list[bytes]) -> None:
    completion = client.completions.create(
        model="deepseek-r1", prompt=[[1, 2, 3]], logprobs=2, echo=False, best_of=1, suffix="!", extra_body={"top_k": 5}
    )
    assert _echo(completion) == sent[-1]


# --- answers pass through ----------------------------------------------------------------------


def test_response_fields_come_back_untouched(client: openai.OpenAI) -> None:
    completion = client.chat.completions.create(model="qwen-fast", messages=MESSAGES, extra_body={"fake": "rich"})
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert (call.id, call.type) == (TOOL_CALL["id"], "function")
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    assert call.function.arguments == '{"city": "Paris"}'  # type: ignore[union-attr]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    assert choice.logprobs.content[0].token == "echo"
    assert choice.logprobs.content[0].logprob == -0.25
    assert choice.logprobs.content[0].top_logprobs[0].bytes == [101, 99, 104, 111]
    assert (choice.message.model_extra or {})["reasoning_content"] == "thought"
    assert completion.usage is not None
    assert completion.usage.model_dump(exclude_none=True) == USAGE
    assert (completion.model_extra or {})["kv_transfer_params"] == KV_TRANSFER_PARAMS
    assert completion.model == "qwen-served"  # the endpoint's answer, as it came


@pytest.mark.parametrize("fake_script", ["ok", "rich"])
@pytest.mark.parametrize("path", ["/chat/completions", "/completions"])
def test_response_bytes_are_identical_to_the_endpoints(
    gateway: RunningGateway, fake: FakeUpstream, http: httpx.Client, path: str, fake_script: str
) -> None:
    body = {"model": "deepseek-r1", "fake": fake_script, **({"prompt": "hi"} if path == "/completions" else {"messages": MESSAGES})}
    raw = orjson.dumps(body)
    through = http.post(gateway.base_url + path, content=raw, headers={"Content-Type": "application/json"})
    direct = http.post(fake.base_url + path, content=raw, headers={"Content-Type": "application/json"})
    assert through.status_code == direct.status_code == 200
    assert through.content == direct.content
    assert through.headers["content-type"] == direct.headers["content-type"]


def _raw_stream(http: httpx.Client, url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    with http.stream("POST", url, content=orjson.dumps(body), headers={"Content-Type": "application/json"}) as response:
        return response.status_code, b"".join(response.iter_raw())


STREAMS = [
    # (id, path, body sent to kvgate, model the endpoint sees)
    ("chat", "/chat/completions", {"model": "deepseek-r1", "messages": MESSAGES}, "deepseek-r1"),
    ("chat-renamed", "/chat/completions", {"model": "qwen-fast", "messages": MESSAGES}, "qwen-served"),
    ("completion", "/completions", {"model": "r1", "prompt": "hi"}, "deepseek-r1"),
]


@pytest.mark.parametrize("script", ["ok", "inband_error"])
@pytest.mark.parametrize(("path", "body", "served"), [s[1:] for s in STREAMS], ids=[s[0] for s in STREAMS])
def test_streamed_bytes_are_identical_to_the_endpoints(
    gateway: RunningGateway, fake: FakeUpstream, http: httpx.Client, path: str, body: dict[str, Any], served: str, script: str
) -> None:
    body = {**body, "stream": True, "stream_options": {"include_usage": True}, "fake": script}
    through_status, through = _raw_stream(http, gateway.base_url + path, body)
    direct_status, direct = _raw_stream(http, fake.base_url + path, {**body, "model": served})
    assert through_status == direct_status == 200
    if script == "inband_error":
        # Relayed unchanged up to and including the engine's error event; whether the engine's
        # [DONE] after it is relayed too is kvgate's choice (no fake [DONE] either way).
        assert through.endswith(INBAND_ERROR) or through.endswith(INBAND_ERROR + b"data: [DONE]\n\n")
        assert direct.startswith(through)
    else:
        assert through == direct
        assert sse_data(through)[-1] == "[DONE]"


# --- failures as the SDK sees them -------------------------------------------------------------


def test_inband_error_raises_api_error(client: openai.OpenAI) -> None:
    received: list[str] = []
    with pytest.raises(openai.APIError, match="EngineCore died") as caught:
        with client.chat.completions.create(model="qwen-fast", messages=MESSAGES, stream=True, extra_body={"fake": "inband_error"}) as stream:
            for chunk in stream:
                received.extend(choice.delta.content or "" for choice in chunk.choices)
    assert "".join(received) == "Hello"
    assert isinstance(caught.value.body, dict) and caught.value.body["code"] == 500


def test_truncated_stream_raises_api_error_without_a_finish_reason(client: openai.OpenAI) -> None:
    finish_reasons: list[str | None] = []
    with pytest.raises(openai.APIError, match="mid-stream") as caught:
        with client.chat.completions.create(model="qwen-fast", messages=MESSAGES, stream=True, extra_body={"fake": "truncate"}) as stream:
            for chunk in stream:
                finish_reasons.extend(choice.finish_reason for choice in chunk.choices)
    assert finish_reasons and set(finish_reasons) == {None}
    assert isinstance(caught.value.body, dict) and caught.value.body["code"] == "upstream_error"


SDK_ERRORS = [
    # (model, fake script, SDK exception, status, error.code): vLLM's integer code (its status) is
    # not an OpenAI code (a string or null) and is not relayed (gateway/errors.py, UpstreamClientError)
    ("no-such-model", "ok", openai.NotFoundError, 404, "model_not_found"),
    ("qwen-fast", "status:400", openai.BadRequestError, 400, None),
    ("qwen-fast", "status:422", openai.UnprocessableEntityError, 422, None),
    ("qwen-fast", "status:429", openai.RateLimitError, 429, None),
    ("qwen-fast", "status:500", openai.InternalServerError, 502, "upstream_error"),
]
SDK_ERROR_CASES = [
    pytest.param(*case, stream, id=f"{case[1]}-{case[0]}-{'stream' if stream else 'plain'}")
    for case in SDK_ERRORS
    for stream in (False, True)
] + [pytest.param("qwen-fast", "first_error", openai.InternalServerError, 502, "upstream_error", True, id="first_error-stream")]


@pytest.mark.parametrize(("model", "script", "error_class", "status", "code", "stream"), SDK_ERROR_CASES)
def test_errors_map_to_sdk_exceptions(
    client: openai.OpenAI, model: str, script: str, error_class: type[openai.APIStatusError], status: int, code: object, stream: bool
) -> None:
    with pytest.raises(error_class) as caught:
        client.chat.completions.create(model=model, messages=MESSAGES, stream=stream, extra_body={"fake": script})
    assert caught.value.status_code == status
    assert caught.value.code == code
    assert caught.value.type in ("invalid_request_error", "rate_limit_error", "server_error")
    assert caught.value.response.headers.get("x-request-id")
    if status == 429:
        assert caught.value.response.headers["retry-after"] == "7"
