import orjson
import pytest

from gateway.continuation import EXTENSION_FIELD, ContinuationRewriter, continuable, continuation_body
from gateway.protocol.openai import Operation, parse_request
from gateway.protocol.sse import StreamObserver


def chat(**extra: object) -> bytes:
    return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "Count"}], "stream": True, **extra})


@pytest.mark.parametrize(
    "body, expected",
    [
        (chat(), True),
        (chat(max_tokens=10, temperature=0), True),
        (chat(stream=False), False),
        (chat(tools=[{"type": "function", "function": {"name": "f"}}]), False),
        (chat(tool_choice="required"), False),
        (chat(response_format={"type": "json_object"}), False),
        (chat(response_format={"type": "json_schema", "json_schema": {}}), False),
        (chat(response_format={"type": "text"}), True),
        (chat(n=2), False),
        (chat(guided_json={"type": "object"}), False),
        (chat(continue_final_message=True), False),
    ],
)
def test_continuable_chat(body: bytes, expected: bool) -> None:
    assert continuable(parse_request(Operation.CHAT, body)) is expected


def test_continuable_completion_needs_a_string_prompt() -> None:
    ok = parse_request(Operation.COMPLETION, b'{"model": "m", "prompt": "Once", "stream": true}')
    tokens = parse_request(Operation.COMPLETION, b'{"model": "m", "prompt": [1, 2], "stream": true}')
    assert continuable(ok) and not continuable(tokens)


def observed(*contents: str, reasoning: bool = False) -> StreamObserver:
    observer = StreamObserver(lambda: 0.0, collect=True)
    observer.feed(b'data: {"id":"a","created":5,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n')
    for content in contents:
        observer.feed(b'data: ' + orjson.dumps({"id": "a", "choices": [{"index": 0, "delta": {"content": content}}]}) + b"\n\n")
    if reasoning:
        observer.feed(b'data: {"choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}\n\n')
    return observer


def test_chat_continuation_body() -> None:
    request = parse_request(Operation.CHAT, chat(max_tokens=10, top_k=5))
    body = orjson.loads(continuation_body(request, observed("One", ", two"), "served") or b"")
    assert body["model"] == "served"
    assert body["max_tokens"] == 8
    assert body["messages"][-1] == {"role": "assistant", "content": "One, two"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["top_k"] == 5 and body["stream"] is True


def test_completion_continuation_appends_to_the_prompt() -> None:
    request = parse_request(Operation.COMPLETION, b'{"model": "m", "prompt": "Once", "stream": true}')
    observer = StreamObserver(lambda: 0.0, collect=True)
    observer.feed(b'data: {"choices":[{"index":0,"text":" upon"}]}\n\n')
    assert orjson.loads(continuation_body(request, observer, "m") or b"")["prompt"] == "Once upon"


def finished_without_text() -> StreamObserver:
    observer = observed()
    observer.feed(b'data: {"id":"a","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')
    return observer


def test_nothing_generated_is_a_restart_with_the_original_request() -> None:
    """Issue 16 item 3 (behaviour change): with nothing generated the stream is restarted, not given up."""
    request = parse_request(Operation.CHAT, chat(max_tokens=10))
    assert continuation_body(request, observed(), "m") == request.raw
    restart = orjson.loads(continuation_body(request, observed(), "served", ask_usage=True) or b"")
    assert restart == {**orjson.loads(request.raw), "model": "served", "stream_options": {"include_usage": True}}


def test_a_continuation_asks_for_usage_when_told() -> None:
    request = parse_request(Operation.CHAT, chat(stream_options={"continuous_usage_stats": True}))
    body = orjson.loads(continuation_body(request, observed("One"), "m", ask_usage=True) or b"")
    assert body["stream_options"] == {"include_usage": True}


def test_a_long_answer_is_not_kept_for_a_continuation() -> None:
    observer = observed(*["x" * 1024] * 300)  # 300 Ki characters > MAX_COLLECTED_CHARS
    assert observer.other_output and observer.text == []
    assert continuation_body(parse_request(Operation.CHAT, chat()), observer, "m") is None


def finished_with_text() -> StreamObserver:
    observer = observed("One", ", two")
    observer.feed(b'data: {"id":"a","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n')
    return observer


@pytest.mark.parametrize(
    "observer, limit",
    [(finished_without_text(), None), (finished_with_text(), 100), (observed("a", reasoning=True), None), (observed("a", "b"), 2)],
)
def test_no_continuation(observer: StreamObserver, limit: int | None) -> None:
    extra = {"max_tokens": limit} if limit else {}
    assert continuation_body(parse_request(Operation.CHAT, chat(**extra)), observer, "m") is None


def test_rewriter_keeps_identity_drops_role_chunk_and_merges_usage() -> None:
    rewriter = ContinuationRewriter({"id": "a", "created": 5, "model": "m", "object": "chat.completion.chunk"}, 3, 1, "e1")
    assert rewriter.rewrite({"id": "b", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}) is None
    out = orjson.loads(rewriter.rewrite({"id": "b", "created": 9, "model": "x", "choices": [{"index": 0, "delta": {"content": " three"}}]})[6:])  # type: ignore[index]
    assert (out["id"], out["created"], out["model"]) == ("a", 5, "m")
    assert out[EXTENSION_FIELD] == {"hop": 1, "endpoint": "e1"}
    usage = orjson.loads(rewriter.rewrite({"id": "b", "choices": [], "usage": {"prompt_tokens": 20, "completion_tokens": 4}})[6:])["usage"]  # type: ignore[index]
    assert usage == {"prompt_tokens": 17, "completion_tokens": 7}
