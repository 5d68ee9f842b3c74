import itertools

import orjson
import pytest

from gateway.protocol.sse import SSEDecoder, StreamObserver, without_usage

STREAM = (
    b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}\n\n'
    b": keep-alive comment\n\n"
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":0}}}\n\n'
    b"data: [DONE]\n\n"
)


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, len(STREAM)])
def test_decoder_same_events_whatever_the_read_boundaries(size: int) -> None:
    decoder = SSEDecoder()
    events = []
    for start in range(0, len(STREAM), size):
        events.extend(decoder.feed(STREAM[start : start + size]))
    assert len(events) == 5
    assert events[-1] == b"[DONE]"
    assert not decoder.pending


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b"data: a\r\n\r\n", [b"a"]),
        (b"data: a\r\rdata: b\n\n", [b"a", b"b"]),
        (b"data:a\ndata: b\n\n", [b"a\nb"]),
        (b"event: x\nid: 3\n\n", []),
        (b"data: a\n", []),
    ],
)
def test_decoder_line_endings_and_fields(raw: bytes, expected: list[bytes]) -> None:
    assert SSEDecoder().feed(raw) == expected


def test_observer_ttft_usage_finish_done() -> None:
    ticks = itertools.count(1)
    observer = StreamObserver(lambda: float(next(ticks)))
    for start in range(0, len(STREAM), 5):
        observer.feed(STREAM[start : start + 5])
    assert observer.first_token_at == 1.0  # the role-only chunk carries no output; "Hi" does
    assert observer.finish_reasons == ["stop"]
    assert observer.usage == {"prompt_tokens": 5, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 0}}
    assert observer.done and observer.error is None


def test_observer_in_band_error_and_malformed_events() -> None:
    observer = StreamObserver(lambda: 0.0)
    observer.feed(b"data: {not json\n\ndata: [1,2]\n\n")
    observer.feed(b'data: {"error": {"message": "EngineCore died", "code": 500}}\n\ndata: [DONE]\n\n')
    assert observer.error == {"message": "EngineCore died", "code": 500}
    assert observer.done
    assert observer.first_token_at is None


def test_observer_reasoning_and_text_completion_count_as_first_token() -> None:
    observer = StreamObserver(lambda: 2.5)
    observer.feed(b'data: {"choices":[{"delta":{"reasoning_content":"hmm"}}]}\n\n')
    assert observer.first_token_at == 2.5
    other = StreamObserver(lambda: 3.0)
    other.feed(b'data: {"choices":[{"text":"x","finish_reason":null}]}\n\n')
    assert other.first_token_at == 3.0


def test_partial_event_is_reported() -> None:
    observer = StreamObserver(lambda: 0.0)
    observer.feed(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: {"cho')
    assert observer.has_partial_event


@pytest.mark.parametrize(
    "events, started",
    [
        ([b": keep-alive\n\n"], False),
        ([b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'], False),
        ([b'data: {"choices":[]}\n\n'], False),
        ([b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'], True),
        ([b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'], True),
        ([b'data: {"choices":[],"usage":{"prompt_tokens":1}}\n\n'], True),
        ([b'data: {"error":{"message":"x"}}\n\n'], True),
        ([b"data: [DONE]\n\n"], True),
        ([b"data: not json\n\n"], True),
        ([b'data: {"type":"ping"}\n\n'], True),
    ],
)
def test_a_stream_starts_past_its_comments_and_role_chunks(events: list[bytes], started: bool) -> None:
    observer = StreamObserver(lambda: 0.0)
    for event in events:
        observer.feed(event)
    assert observer.started is started


CHUNK = b'{"id":"c","choices":[{"index":0,"delta":{"content":"a"}}]'


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b"data: " + CHUNK + b"}\n\n", b"data: " + CHUNK + b"}\n\n"),  # no usage: untouched
        (b"data: " + CHUNK + b',"usage":null}\n\n', b"data: " + CHUNK + b"}\n\n"),  # OpenAI's framing
        (b'data: {"usage":null,' + CHUNK[1:] + b"}\n\n", b"data: " + CHUNK + b"}\n\n"),
        (b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":5}}\n\n', None),  # the usage chunk: dropped
        (b"data: " + CHUNK + b',"usage":{"prompt_tokens":5}}\n\n', b"data: " + CHUNK + b"}\n\n"),  # re-serialized
    ],
)
def test_without_usage(raw: bytes, expected: bytes | None) -> None:
    assert without_usage(raw, orjson.loads(raw[6:])) == expected


def test_without_usage_never_touches_a_usage_inside_a_string() -> None:
    raw = b'data: {"choices":[{"index":0,"delta":{"content":"{\\"usage\\":null}"}}],"usage":null}\n\n'
    out = without_usage(raw, orjson.loads(raw[6:]))
    assert out is not None and orjson.loads(out[6:]) == {"choices": [{"index": 0, "delta": {"content": '{"usage":null}'}}]}
