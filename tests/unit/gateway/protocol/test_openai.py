import orjson
import pytest

from gateway.errors import InvalidRequestError
from gateway.protocol.openai import Operation, parse_request

CHAT = Operation.CHAT
TEXT = Operation.COMPLETION


@pytest.mark.parametrize(
    "operation, body, param",
    [
        (CHAT, b"{bad", None),
        (CHAT, b"[1]", None),
        (CHAT, b'{"messages": [{"role": "user", "content": "x"}]}', "model"),
        (CHAT, b'{"model": 3, "messages": [{"role": "user"}]}', "model"),
        (CHAT, b'{"model": "", "messages": [{"role": "user"}]}', "model"),
        (CHAT, b'{"model": "m"}', "messages"),
        (CHAT, b'{"model": "m", "messages": "hi"}', "messages"),
        (CHAT, b'{"model": "m", "messages": []}', "messages"),
        (CHAT, b'{"model": "m", "messages": ["hi"]}', "messages[0]"),
        (CHAT, b'{"model": "m", "messages": [{"content": "x"}]}', "messages[0].role"),
        (CHAT, b'{"model": "m", "messages": [{"role": "user"}], "stream": "yes"}', "stream"),
        (CHAT, b'{"model": "m", "messages": [{"role": "user"}], "stream_options": []}', "stream_options"),
        (CHAT, b'{"model": "m", "messages": [{"role": "user"}], "user": 5}', "user"),
        (CHAT, b'{"model": "m", "messages": [{"role": "user"}], "prompt_cache_key": true}', "prompt_cache_key"),
        (TEXT, b'{"model": "m"}', "prompt"),
        (TEXT, b'{"model": "m", "prompt": 5}', "prompt"),
        (TEXT, b'{"model": "m", "prompt": []}', "prompt"),
        (TEXT, b'{"model": "m", "prompt": ["a", 1]}', "prompt"),
    ],
)
def test_invalid_requests_name_the_field(operation: Operation, body: bytes, param: str | None) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        parse_request(operation, body)
    assert caught.value.status == 400
    assert caught.value.param == param


@pytest.mark.parametrize(
    "operation, body",
    [
        (CHAT, b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": null}'),
        (TEXT, b'{"model": "m", "prompt": "hello"}'),
        (TEXT, b'{"model": "m", "prompt": ["a", "b"]}'),
        (TEXT, b'{"model": "m", "prompt": [1, 2, 3]}'),
        (TEXT, b'{"model": "m", "prompt": [[1, 2], [3]]}'),
    ],
)
def test_valid_requests(operation: Operation, body: bytes) -> None:
    request = parse_request(operation, body)
    assert request.model == "m"
    assert request.stream is False


def test_body_forwarded_byte_for_byte_unless_renamed() -> None:
    raw = b'{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"top_k":3,"seed":1.0}'
    request = parse_request(CHAT, raw)
    assert request.stream
    assert request.body_for("m") is raw
    renamed = orjson.loads(request.body_for("served"))
    assert renamed == {**orjson.loads(raw), "model": "served"}


@pytest.mark.parametrize(
    "raw, served, expected_options",
    [
        (b' {"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}', "m", {"include_usage": True}),
        (b'{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true}', "served", {"include_usage": True}),
        (b'{"model":"m","messages":[{"role":"user"}],"stream":true,"stream_options":{"include_usage":false}}', "m",
         {"include_usage": True}),
        (b'{"model":"m","messages":[{"role":"user"}],"stream":true,"stream_options":{"continuous_usage_stats":true}}', "m",
         {"include_usage": True}),
    ],
)
def test_body_asking_for_usage(raw: bytes, served: str, expected_options: dict) -> None:
    request = parse_request(CHAT, raw)
    assert not request.wants_usage
    sent = orjson.loads(request.body_for(served, ask_usage=True))
    assert sent == {**orjson.loads(raw), "model": served, "stream_options": expected_options}


def test_a_client_asking_for_usage_is_forwarded_untouched() -> None:
    raw = b'{"model":"m","messages":[{"role":"user"}],"stream":true,"stream_options":{"include_usage":true}}'
    request = parse_request(CHAT, raw)
    assert request.wants_usage and request.body_for("m") is raw
