"""The Anthropic Messages view: client key, parse, prompt, usage, Anthropic errors, the stream."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import InvalidRequestError, NoHealthyEndpointError, RateLimitError, UpstreamClientError
from gateway.keys.pricing import TokenUsage
from gateway.prefix.hashing import PromptHasher
from gateway.protocol import messages
from gateway.protocol.openai import Operation, parse_request
from tests.contract.vllm_apis import DATA

MESSAGES = [{"role": "user", "content": "hi"}]


def raw(**body: object) -> bytes:
    return orjson.dumps({"model": "m", "messages": MESSAGES, "max_tokens": 8, **body})


def test_client_key_from_x_api_key_or_bearer() -> None:
    assert messages.client_key({"x-api-key": "sk-1", "anthropic-version": "2023-06-01"}) == "sk-1"
    assert messages.client_key({"authorization": "Bearer sk-2"}) == "sk-2"
    assert messages.client_key({}) is None
    assert "x-api-key" in messages.CLIENT_HEADERS and "anthropic-version" in messages.CLIENT_HEADERS


def test_parse_create_and_count_tokens() -> None:
    request = messages.parse_create(raw(stream=True, metadata={"user_id": "u1"}))
    assert (request.api, request.model, request.stream) == ("messages", "m", True)
    assert request.prompt is not None and request.prompt.body["user"] == "u1"
    count = messages.parse_count_tokens(orjson.dumps({"model": "m", "messages": MESSAGES, "stream": True}))
    assert (count.api, count.stream, count.prompt) == ("messages.count_tokens", False, None)


@pytest.mark.parametrize("body, param", [
    ({"model": "m", "max_tokens": 8}, "messages"),
    ({"model": "m", "messages": [], "max_tokens": 8}, "messages"),
    ({"model": "m", "messages": [{"content": "x"}], "max_tokens": 8}, "messages[0].role"),
    ({"model": "m", "messages": [{"role": "user", "content": 3}], "max_tokens": 8}, "messages[0].content"),
    ({"model": "m", "messages": MESSAGES}, "max_tokens"),
    ({"model": "m", "messages": MESSAGES, "max_tokens": 0}, "max_tokens"),
    ({"model": "m", "messages": MESSAGES, "max_tokens": True}, "max_tokens"),
    ({"model": "m", "messages": MESSAGES, "max_tokens": 8, "system": 5}, "system"),
    ({"messages": MESSAGES, "max_tokens": 8}, "model"),
])
def test_parse_names_the_field_at_fault(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        messages.parse_create(orjson.dumps(body))
    assert caught.value.param == param


def test_same_conversation_hashes_as_the_chat_request() -> None:
    system = "You are a terse assistant for a gateway's users. " * 20
    chat = parse_request(Operation.CHAT, orjson.dumps({"model": "m", "messages": [
        {"role": "system", "content": [{"type": "text", "text": system}]}, {"role": "user", "content": "hi"}]}))
    request = messages.parse_create(raw(system=[{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}]))
    hasher = PromptHasher(memo_hashes=0)
    assert request.prompt is not None
    assert hasher.key(request.prompt, "m").blocks == hasher.key(chat, "m").blocks


def test_usage_counts_cached_tokens_inside_the_input() -> None:
    assert messages.usage_of(orjson.loads((DATA / "msg_create.json").read_bytes())) == TokenUsage(32, 0, 12)
    usage = {"input_tokens": 4, "cache_read_input_tokens": 128, "cache_creation_input_tokens": 0, "output_tokens": 3}
    assert messages.usage_of({"usage": usage}) == TokenUsage(132, 128, 3)
    assert messages.usage_of({}) is None


@pytest.mark.parametrize("error, kind", [
    (InvalidRequestError("bad"), "invalid_request_error"),
    (RateLimitError("slow down"), "rate_limit_error"),
    (NoHealthyEndpointError("none"), "overloaded_error"),
])
def test_errors_have_anthropics_shape(error, kind: str) -> None:
    body = orjson.loads(messages.error_body(error))
    assert body == {"type": "error", "error": {"type": kind, "message": error.message}}


def test_an_endpoints_anthropic_error_gets_anthropics_type() -> None:
    recorded = (DATA / "msg_err.json").read_bytes()  # vLLM's: its own type, NotFoundError
    relayed = orjson.loads(messages.error_body(UpstreamClientError(404, recorded)))
    assert relayed == {"type": "error", "error": {"type": "not_found_error",
                                                  "message": orjson.loads(recorded)["error"]["message"]}}
    own = b'{"type":"error","error":{"type":"overloaded_error","message":"busy"}}'
    assert messages.error_body(UpstreamClientError(429, own)) == own  # Anthropic's own type: as it came
    wrapped = orjson.loads(messages.error_body(UpstreamClientError(400, b'{"error": {"message": "too long"}}')))
    assert wrapped == {"type": "error", "error": {"type": "invalid_request_error", "message": "too long"}}


def recorded_stream() -> bytes:
    return (DATA / "msg_stream.txt").read_bytes()


@pytest.mark.parametrize("size", [1, 13, 100_000])
def test_observer_on_the_recorded_stream(size: int) -> None:
    observer = messages.MessagesStreamObserver(lambda: 5.0)
    data = recorded_stream()
    for start in range(0, len(data), size):
        observer.feed(data[start : start + size])
    assert observer.done and observer.error is None
    assert observer.response_id == "chatcmpl-8db1ebacd1da1cdd"
    assert observer.tokens == TokenUsage(32, 0, 6)
    assert observer.output_events == 6 and observer.first_token_at == 5.0
    assert observer.finish_reasons == ["max_tokens"]


def test_preamble_and_break_after_content() -> None:
    data = recorded_stream()
    head = data[: data.index(b"event: content_block_delta")]
    observer = messages.MessagesStreamObserver(lambda: 1.0)
    observer.feed(head)
    assert not observer.started and observer.tokens == TokenUsage(32, 0, 0)
    observer.feed(data[len(head) : data.index(b"event: content_block_stop")])
    assert observer.started and not observer.done
    event = observer.error_event("reset")
    assert event.startswith(b"event: error\ndata: ")
    payload = orjson.loads(event.split(b"data: ", 1)[1])
    assert payload["type"] == "error" and payload["error"]["type"] == "api_error"
    assert b"message_stop" not in event


def test_in_stream_error_event() -> None:
    observer = messages.MessagesStreamObserver(lambda: 1.0)
    events = observer.split(b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"busy"}}\n\n')
    assert observer.error == {"type": "overloaded_error", "message": "busy"}
    assert events[0][1] is not None
