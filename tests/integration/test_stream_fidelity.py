"""What a client gets from a stream is what the endpoint sent it, and kvgate still counts it.

Scripted upstreams on raw TCP (``tests/support/scripted.py``); the official ``openai`` SDK or raw
httpx as the client. Issue 16, items 1, 2, 3 and 7:

* usage is asked for on every stream and stripped for a client that did not ask, byte for byte
  (vLLM's and OpenAI's framing); an endpoint refusing ``stream_options`` is asked again without
  it, remembered, and counted by estimate;
* a stream's preamble (comments, the role chunk) is held: a failure before content fails over;
* a break with no generated text restarts the request on the next endpoint;
* a compressed answer (buffered, stream, error) reaches the client readable.

Topology: cluster ``main`` = endpoints A, B (round-robin, A first); model ``m``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from gateway.app import create_app
from gateway.config import build_settings
from tests.support.gateway import metric
from tests.support.scripted import ERROR_EVENT, WORDS, ScriptedUpstream, chunk_event
from tests.support.threads import ServerThread

FULL = "".join(WORDS)
MESSAGES = [{"role": "user", "content": "count"}]
CHAT = {"model": "m", "messages": MESSAGES, "stream": True}


@pytest.fixture(scope="module")
def upstreams() -> Iterator[dict[str, ScriptedUpstream]]:
    servers = {name: ScriptedUpstream(name).start() for name in ("A", "B", "C")}
    yield servers
    for server in servers.values():
        server.stop()


def _gateway(upstreams: dict[str, ScriptedUpstream], client: str = "native", names: tuple[str, ...] = ("A", "B")) -> ServerThread:
    for server in upstreams.values():
        server.script([("counter", None)])
        server.usage_null = False
    settings = build_settings(
        {
            "routing": {"policy": "round-robin"},
            "upstream": {"client": client, "timeouts": {"first_byte_s": 2.0, "idle_s": 1.0, "total_s": 3.0}},
            "health": {"interval_s": 60},
            "circuit": {"consecutive_failures": 50, "cooldown_s": 30},
            "clusters": {"main": {"endpoints": [{"name": name, "url": upstreams[name].base_url, "model": "m"} for name in names]}},
            "models": {"m": {"cluster": "main"}},
        }
    )
    thread = ServerThread.uvicorn(create_app(settings, health_checks=False))
    thread.start()
    return thread


@pytest.fixture(params=["native", "aiohttp"])
def gw_any_client(upstreams: dict[str, ScriptedUpstream], request: pytest.FixtureRequest) -> Iterator[str]:
    thread = _gateway(upstreams, request.param)
    yield f"http://127.0.0.1:{thread.port}"
    thread.stop()


@pytest.fixture
def gw(upstreams: dict[str, ScriptedUpstream]) -> Iterator[str]:
    thread = _gateway(upstreams)
    yield f"http://127.0.0.1:{thread.port}"
    thread.stop()


@pytest.fixture
def sdk(gw: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{gw}/v1", api_key="unused", max_retries=0) as client:
        yield client


def raw_stream(url: str, body: dict[str, Any]) -> tuple[httpx.Response, bytes]:
    with httpx.stream("POST", url, json=body, timeout=10) as response:
        return response, response.read()


def tokens(gw: str, kind: str) -> float:
    return metric(httpx.get(f"{gw}/metrics").text, "kvgate_tokens_total", cluster="main", kind=kind)


def sdk_text(sdk: openai.OpenAI, **extra: Any) -> tuple[str, list[Any], str]:
    """The streamed text, the chunks, and the endpoint that served them."""
    raw = sdk.chat.completions.with_raw_response.create(model="m", messages=MESSAGES, stream=True, **extra)
    chunks = list(raw.parse())
    text = "".join(choice.delta.content or "" for chunk in chunks for choice in chunk.choices)
    return text, chunks, raw.headers["x-kvgate-endpoint"]


# --- item 1: usage always asked for, stripped for a client that did not ask -------------------------

@pytest.mark.parametrize("usage_null", [False, True], ids=["vllm-framing", "openai-usage-null"])
def test_a_stream_without_include_usage_is_byte_identical_and_counted(
    gw: str, upstreams: dict[str, ScriptedUpstream], usage_null: bool
) -> None:
    upstreams["A"].usage_null = usage_null
    _, direct = raw_stream(upstreams["A"].base_url + "/chat/completions", CHAT)  # what a client gets without kvgate
    before = (tokens(gw, "prompt"), tokens(gw, "completion"))
    response, relayed = raw_stream(f"{gw}/v1/chat/completions", CHAT)
    assert response.headers["x-kvgate-endpoint"] == "A"
    assert relayed == direct and relayed.endswith(b"data: [DONE]\n\n")
    _, forwarded = upstreams["A"].requests[-1]
    assert forwarded["stream_options"] == {"include_usage": True}  # asked on the client's behalf
    assert (tokens(gw, "prompt"), tokens(gw, "completion")) == (before[0] + 5, before[1] + 10)  # the endpoint's usage


def test_a_client_that_asks_for_usage_gets_it_untouched(gw: str, upstreams: dict[str, ScriptedUpstream]) -> None:
    upstreams["A"].usage_null = True
    body = {**CHAT, "stream_options": {"include_usage": True}}
    _, direct = raw_stream(upstreams["A"].base_url + "/chat/completions", body)
    _, relayed = raw_stream(f"{gw}/v1/chat/completions", body)
    assert relayed == direct and b'"usage":{"prompt_tokens":5' in relayed


def test_the_sdk_sees_no_usage_it_did_not_ask_for(sdk: openai.OpenAI) -> None:
    text, chunks, _ = sdk_text(sdk)
    assert text == FULL and chunks and all(chunk.usage is None and chunk.choices for chunk in chunks)


@pytest.mark.parametrize("status", [400, 422])
def test_an_endpoint_refusing_stream_options_is_asked_without_and_remembered(
    gw: str, sdk: openai.OpenAI, upstreams: dict[str, ScriptedUpstream], status: int
) -> None:
    upstreams["A"].script([("refuse_stream_options", status), ("counter", None)])
    upstreams["B"].script([("json", 500, {"error": {"message": "B must not be needed"}})])
    completion = tokens(gw, "completion")
    text, _, endpoint = sdk_text(sdk)
    assert (text, endpoint) == (FULL, "A")  # no failover, no error for the client
    assert ["stream_options" in body for _, body in upstreams["A"].requests] == [True, False]
    assert tokens(gw, "completion") == completion + 10  # estimated: one token per output event
    text, _, endpoint = sdk_text(sdk)
    assert (text, endpoint) == (FULL, "A")
    assert ["stream_options" in body for _, body in upstreams["A"].requests] == [True, False, False]  # remembered


# --- item 2: a preamble is held; a failure before content fails over invisibly ----------------------

PREAMBLES = {"keep-alive": [b": keep-alive\n\n"], "role": [chunk_event(role=True)],
             "both": [b": keep-alive\n\n", chunk_event(role=True), b": keep-alive\n\n"]}
FAULTS = {"error-event": [("chunk", ERROR_EVENT), ("chunk", b"data: [DONE]\n\n"), ("end",)],
          "reset": [("reset",)], "close": [("close",)], "clean-end": [("end",)]}


@pytest.mark.parametrize("fault", FAULTS)
@pytest.mark.parametrize("preamble", PREAMBLES)
def test_a_failure_after_only_a_preamble_fails_over_invisibly(
    sdk: openai.OpenAI, upstreams: dict[str, ScriptedUpstream], preamble: str, fault: str
) -> None:
    upstreams["A"].script([("status", 200), *[("chunk", data) for data in PREAMBLES[preamble]], *FAULTS[fault]])
    text, chunks, endpoint = sdk_text(sdk)  # the SDK raises on any error event
    assert (text, endpoint) == (FULL, "B")
    roles = [choice.delta.role for chunk in chunks for choice in chunk.choices if choice.delta.role]
    assert roles == ["assistant"]  # B's role chunk only: A's held one never went out


def test_a_held_preamble_is_relayed_unchanged_once_content_comes(gw: str, upstreams: dict[str, ScriptedUpstream]) -> None:
    steps = [b": keep-alive\n\n", chunk_event(role=True), chunk_event(" hi"), chunk_event(finish="stop"), b"data: [DONE]\n\n"]
    upstreams["A"].script([("status", 200), *[("chunk", data) for data in steps], ("end",)])
    _, relayed = raw_stream(f"{gw}/v1/chat/completions", CHAT)
    assert relayed == b"".join(steps)


# --- item 3: a break before any generated text restarts the request -------------------------------

def test_a_break_before_any_text_restarts_on_the_next_endpoint(sdk: openai.OpenAI, upstreams: dict[str, ScriptedUpstream]) -> None:
    long_comment = b": " + b"x" * (70 * 1024) + b"\n\n"  # past the 64 KiB hold: the stream is committed
    upstreams["A"].script([("status", 200), ("chunk", chunk_event(role=True)), ("chunk", long_comment), ("reset",)])
    text, chunks, endpoint = sdk_text(sdk, max_tokens=20)
    assert (text, endpoint) == (FULL, "A")  # committed on A, finished by B
    roles = [choice.delta.role for chunk in chunks for choice in chunk.choices if choice.delta.role]
    assert roles == ["assistant"] and {chunk.id for chunk in chunks} == {"chatcmpl-up"}
    _, restart = upstreams["B"].requests[-1]
    assert restart["messages"] == MESSAGES and restart["max_tokens"] == 20  # the original request, not a continuation
    assert "continue_final_message" not in restart


def test_a_continuation_that_breaks_too_is_continued_from_all_the_text_sent(upstreams: dict[str, ScriptedUpstream]) -> None:
    upstreams_abc = _gateway(upstreams, names=("A", "B", "C"))
    try:
        upstreams["A"].script([("counter", 3), ("reset",)])
        upstreams["B"].script([("counter", 3), ("reset",)])  # continues from word 4, breaks after word 6
        with openai.OpenAI(base_url=f"http://127.0.0.1:{upstreams_abc.port}/v1", api_key="unused", max_retries=0) as client:
            text, _, _ = sdk_text(client, max_tokens=20)
    finally:
        upstreams_abc.stop()
    assert text == FULL  # no text lost or repeated across two hops
    _, last = upstreams["C"].requests[-1]
    assert last["messages"][-1] == {"role": "assistant", "content": "".join(WORDS[:6])} and last["max_tokens"] == 14


# --- item 7: a compressed answer is decoded, never relayed without its Content-Encoding ---------------

ANSWER = {"id": "chatcmpl-gz", "object": "chat.completion", "created": 42, "model": "m",
          "choices": [{"index": 0, "message": {"role": "assistant", "content": "unzipped"}, "finish_reason": "stop"}],
          "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}


def test_a_gzip_answer_reaches_the_sdk_readable(gw_any_client: str, upstreams: dict[str, ScriptedUpstream]) -> None:
    upstreams["A"].script([("gzip_json", 200, ANSWER)])
    with openai.OpenAI(base_url=f"{gw_any_client}/v1", api_key="unused", max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)
        answer = raw.parse()
    assert answer.choices[0].message.content == "unzipped" and answer.usage and answer.usage.total_tokens == 4
    assert "content-encoding" not in raw.headers and int(raw.headers["content-length"]) == len(raw.content)
    assert tokens(gw_any_client, "completion") >= 1


def test_a_gzip_stream_reaches_the_sdk_readable_and_is_counted(gw_any_client: str, upstreams: dict[str, ScriptedUpstream]) -> None:
    upstreams["A"].script([("gzip_counter",)])
    before = tokens(gw_any_client, "completion")
    with openai.OpenAI(base_url=f"{gw_any_client}/v1", api_key="unused", max_retries=0) as client:
        raw = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES, stream=True)
        text = "".join(choice.delta.content or "" for chunk in raw.parse() for choice in chunk.choices)
    assert text == FULL and "content-encoding" not in raw.headers
    assert tokens(gw_any_client, "completion") == before + 10


def test_a_gzip_client_error_reaches_the_sdk_readable(gw_any_client: str, upstreams: dict[str, ScriptedUpstream]) -> None:
    error = {"error": {"message": "max_tokens is too large", "type": "BadRequestError", "param": "max_tokens", "code": 400}}
    upstreams["A"].script([("gzip_json", 400, error)])
    with openai.OpenAI(base_url=f"{gw_any_client}/v1", api_key="unused", max_retries=0) as client:
        with pytest.raises(openai.BadRequestError) as raised:
            client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=10**6)
    assert raised.value.status_code == 400 and "max_tokens is too large" in str(raised.value)


def test_an_unknown_content_encoding_fails_over(gw: str, upstreams: dict[str, ScriptedUpstream]) -> None:
    upstreams["A"].script([("json", 200, ANSWER, {"content-encoding": "br"})])
    response = httpx.post(f"{gw}/v1/chat/completions", json={"model": "m", "messages": MESSAGES}, timeout=10)
    assert response.status_code == 200 and response.headers["x-kvgate-endpoint"] == "B"
    assert orjson.loads(response.content)["choices"][0]["message"]["content"] == FULL
