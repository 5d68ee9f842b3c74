"""Streams that go wrong after the 200: relayed honestly, counted as failures, never faked."""

from __future__ import annotations

import httpx
import pytest

from tests.support.fake_upstream import INBAND_ERROR, FakeUpstream
from tests.support.gateway import RunningGateway, chat_body, error_shape_ok, metric, sse_data, streamed_text
from tests.support.threads import wait_until

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def _counts(gateway: RunningGateway) -> dict[str, float]:
    text = gateway.metrics_text()
    return {
        "success": metric(text, "kvgate_requests_total", endpoint="fast-a", outcome="success"),
        "upstream_error": metric(text, "kvgate_requests_total", endpoint="fast-a", outcome="upstream_error"),
        "stream_error": metric(text, "kvgate_upstream_failures_total", endpoint="fast-a", reason="stream_error"),
        "broken_stream": metric(text, "kvgate_upstream_failures_total", endpoint="fast-a", reason="broken_stream"),
    }


def _settled(gateway: RunningGateway) -> bool:
    return gateway.metric("kvgate_endpoint_in_flight", endpoint="fast-a") == 0


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]

# Streams kvgate might continue on another endpoint are relayed event by event; the others (tool
# calls, token prompts, failover off) byte by byte. Both must end the same way for the client.
STREAMS = [
    pytest.param(CHAT, chat_body(), {}, id="chat"),
    pytest.param(CHAT, chat_body(tools=TOOLS), {}, id="chat-with-tools"),
    pytest.param(CHAT, chat_body(), {"X-Failover-Route": "false"}, id="chat-failover-off"),
    pytest.param(COMPLETIONS, {"model": "qwen-fast", "prompt": "hi"}, {}, id="completions"),
    pytest.param(COMPLETIONS, {"model": "qwen-fast", "prompt": [1, 2]}, {}, id="completions-token-prompt"),
]


@pytest.mark.parametrize(("path", "body", "headers"), STREAMS)
def test_inband_error_is_relayed_and_counted_as_upstream_error(
    gateway: RunningGateway, fake_a: FakeUpstream, http: httpx.Client, path: str, body: dict, headers: dict
) -> None:
    before = _counts(gateway)
    request = {**body, "stream": True, "fake": "inband_error"}
    with http.stream("POST", gateway.url + path, json=request, headers=headers) as response:
        raw = response.read()
    assert response.status_code == 200  # the 200 was already on its way when the error came
    assert INBAND_ERROR in raw  # relayed exactly as the engine sent it
    events = sse_data(raw)
    errors = [event for event in events if isinstance(event, dict) and "error" in event]
    assert [error["error"]["message"] for error in errors] == ["EngineCore died"]
    assert streamed_text(raw) == "Hello"
    assert wait_until(lambda: _settled(gateway))
    after = _counts(gateway)
    assert after["upstream_error"] == before["upstream_error"] + 1
    assert after["stream_error"] == before["stream_error"] + 1
    assert after["success"] == before["success"]


@pytest.mark.parametrize(("path", "body", "headers"), STREAMS)
def test_truncated_stream_ends_with_an_error_event_and_no_done(
    gateway: RunningGateway, http: httpx.Client, path: str, body: dict, headers: dict
) -> None:
    before = _counts(gateway)
    request = {**body, "stream": True, "fake": "truncate"}
    with http.stream("POST", gateway.url + path, json=request, headers=headers) as response:
        raw = response.read()
    assert response.status_code == 200
    events = sse_data(raw)
    assert "[DONE]" not in events
    assert b"[DONE]" not in raw
    last = events[-1]
    assert error_shape_ok(last), last
    assert last["error"]["code"] == "upstream_error"
    assert raw.endswith(b"\n\n")
    assert all(choice.get("finish_reason") is None for event in events[:-1] for choice in event["choices"])
    # Tokens relayed before the break: all of "Hello from" once the relay keeps the bytes aiohttp
    # buffered before the break (test_upstream_client.py pins that down deterministically).
    assert "Hello from".startswith(streamed_text(raw))
    assert wait_until(lambda: _settled(gateway))
    after = _counts(gateway)
    assert after["upstream_error"] == before["upstream_error"] + 1
    assert after["broken_stream"] == before["broken_stream"] + 1
    assert after["success"] == before["success"]


def test_complete_stream_is_a_success(gateway: RunningGateway, http: httpx.Client) -> None:
    before = _counts(gateway)
    tokens = gateway.metric("kvgate_tokens_total", cluster="fast", kind="cached")
    response = http.post(gateway.url + CHAT, json=chat_body(stream=True, stream_options={"include_usage": True}))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.text.endswith("data: [DONE]\n\n")
    assert streamed_text(response.content) == "Hello from a"
    assert wait_until(lambda: _settled(gateway))
    after = _counts(gateway)
    assert after["success"] == before["success"] + 1
    assert after["upstream_error"] == before["upstream_error"]
    assert gateway.metric("kvgate_tokens_total", cluster="fast", kind="cached") == tokens + 4
