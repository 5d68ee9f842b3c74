"""The Responses API view: parse, prompt for hashing, usage, ids to record, the stream observer."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import InvalidRequestError
from gateway.keys.pricing import TokenUsage
from gateway.prefix.hashing import PromptHasher
from gateway.protocol import responses
from gateway.protocol.openai import Operation, parse_request
from tests.contract.vllm_apis import DATA


def raw(**body: object) -> bytes:
    return orjson.dumps({"model": "m", "input": "hi", **body})


def test_parse_reads_model_stream_and_previous_id() -> None:
    request = responses.parse_create(raw(stream=True, previous_response_id="resp_1", temperature=0.3))
    assert (request.api, request.model, request.stream, request.state_id) == ("responses", "m", True, "resp_1")
    assert request.body_for("m") is request.raw
    assert orjson.loads(request.body_for("served"))["model"] == "served"
    assert responses.state_param(request) == "previous_response_id"


@pytest.mark.parametrize("body, param", [
    ({"model": "m"}, "input"),
    ({"input": "hi"}, "model"),
    ({"model": "m", "input": 3}, "input"),
    ({"model": "m", "input": ["x"]}, "input"),
    ({"model": "m", "input": "hi", "stream": "yes"}, "stream"),
    ({"model": "m", "input": "hi", "instructions": 1}, "instructions"),
    ({"model": "m", "input": "hi", "previous_response_id": "../etc"}, "previous_response_id"),
    ({"model": "m", "input": "hi", "store": 1}, "store"),
    ({"model": "m", "input": "hi", "tools": {}}, "tools"),
])
def test_parse_names_the_field_at_fault(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        responses.parse_create(orjson.dumps(body))
    assert caught.value.param == param and caught.value.status == 400


def test_not_json_is_a_400() -> None:
    with pytest.raises(InvalidRequestError):
        responses.parse_create(b"{nope")


def test_resource_view_is_routed_by_id_alone() -> None:
    request = responses.parse_resource(responses.RETRIEVE, "resp_8f16ea6b8f4e837b")
    assert (request.model, request.state_id, request.raw, request.prompt) == ("", "resp_8f16ea6b8f4e837b", b"", None)
    assert responses.state_param(request) == "response_id"
    with pytest.raises(InvalidRequestError):
        responses.parse_resource(responses.CANCEL, "a/b")


def test_prompt_is_instructions_then_input_as_chat_messages() -> None:
    body = {"instructions": "Be brief.", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Hello"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
    ]}
    assert responses.prompt_messages(body) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hello"}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
    ]


def test_same_conversation_hashes_as_the_chat_request() -> None:
    long = "You are a helpful assistant that answers in one line. " * 20
    chat = parse_request(Operation.CHAT, orjson.dumps(
        {"model": "m", "messages": [{"role": "system", "content": long}, {"role": "user", "content": "hi"}]}))
    resp = responses.parse_create(raw(instructions=long, input="hi"))
    hasher = PromptHasher(memo_hashes=0)
    assert resp.prompt is not None and resp.prompt.operation is Operation.CHAT
    assert hasher.key(resp.prompt, "m").blocks == hasher.key(chat, "m").blocks
    assert len(hasher.key(chat, "m").blocks) > 2


def test_usage_of_recorded_answers() -> None:
    created = orjson.loads((DATA / "resp_create.json").read_bytes())
    assert responses.usage_of(created) == TokenUsage(32, 0, 16)
    assert responses.usage_of({"usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 99},
                                         "output_tokens": 2}}) == TokenUsage(10, 10, 2)
    assert responses.usage_of({"usage": None}) is None
    assert responses.response_id_of(created) == "resp_8f16ea6b8f4e837b"
    assert responses.response_id_of(orjson.loads((DATA / "resp_get.json").read_bytes())) is None


def test_ids_to_record_follow_store_and_encrypted_reasoning() -> None:
    answer = {"id": "resp_1", "output": [{"type": "reasoning", "id": "rs_1", "encrypted_content": "xyz"},
                                         {"type": "message", "id": "msg_1"}]}
    assert responses.ids_to_record(responses.parse_create(raw()), answer) == ["resp_1", "rs_1"]
    assert responses.ids_to_record(responses.parse_create(raw(store=False)), answer) == ["rs_1"]
    follow = responses.parse_create(raw(store=False, input=[answer["output"][0], {"role": "user", "content": "go"}]))
    assert follow.state_id == "rs_1" and responses.state_param(follow) == "input"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def recorded_stream() -> bytes:
    return (DATA / "resp_stream.txt").read_bytes()


@pytest.mark.parametrize("size", [1, 17, 300, 100_000])
def test_observer_on_the_recorded_stream(size: int) -> None:
    observer = responses.ResponsesStreamObserver(Clock())
    data = recorded_stream()
    for start in range(0, len(data), size):
        observer.feed(data[start : start + size])
    assert observer.done and observer.error is None
    assert observer.response_id == "resp_a2adcf163a1bc841"
    assert observer.tokens == TokenUsage(32, 0, 8)
    assert observer.usage == {"prompt_tokens": 32, "completion_tokens": 8, "total_tokens": 40,
                              "prompt_tokens_details": {"cached_tokens": 0}}
    assert observer.output_events == 8 and observer.first_token_at is not None
    assert observer.sequence == 15 and observer.finish_reasons == ["incomplete"]
    assert observer.collect is False and observer.other_output is True


def test_preamble_does_not_start_the_stream() -> None:
    data = recorded_stream()
    head = data[: data.index(b"event: response.output_text.delta")]
    observer = responses.ResponsesStreamObserver(Clock())
    observer.feed(head)
    assert not observer.started and observer.response_id == "resp_a2adcf163a1bc841"
    observer.feed(data[len(head):])
    assert observer.started


def test_break_after_content_ends_with_response_failed_numbered_next() -> None:
    data = recorded_stream()
    cut = data.index(b"event: response.output_text.done") + 20
    observer = responses.ResponsesStreamObserver(Clock())
    observer.feed(data[:cut])
    assert not observer.done and observer.has_partial_event
    event = observer.error_event("connection reset")
    assert event.startswith(b"\n\nevent: response.failed\ndata: ")
    payload = orjson.loads(event.split(b"data: ", 1)[1])
    assert payload["type"] == "response.failed" and payload["sequence_number"] == 12
    assert payload["response"]["id"] == "resp_a2adcf163a1bc841" and payload["response"]["status"] == "failed"
    assert "connection reset" in payload["response"]["error"]["message"]
    assert b"response.completed" not in event


def test_break_before_response_created_is_an_error_event() -> None:
    event = responses.ResponsesStreamObserver(Clock()).error_event("refused")
    assert event.startswith(b"event: error\ndata: ")
    assert orjson.loads(event.split(b"data: ", 1)[1])["sequence_number"] == 0


@pytest.mark.parametrize("payload, message", [
    ({"type": "error", "code": "server_error", "message": "engine died", "sequence_number": 3}, "engine died"),
    ({"type": "response.failed", "sequence_number": 4,
      "response": {"status": "failed", "error": {"code": "server_error", "message": "boom"}}}, "boom"),
])
def test_in_stream_errors(payload: dict, message: str) -> None:
    observer = responses.ResponsesStreamObserver(Clock())
    events = observer.split(b"event: x\ndata: " + orjson.dumps(payload) + b"\n\n")
    assert observer.error is not None and observer.error["message"] == message
    assert events[0][1] is None or "error" in events[0][1]
