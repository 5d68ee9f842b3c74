"""Failover conformance: scripted upstreams on raw TCP, one case per failure class.

Each case states what the client must see. The failure classes come from kvgate's contract
(README, "Failover") and from failure reports against other gateways, in our words:
a truncated stream that ends as if it succeeded; a fallback that never fires once one byte was
relayed; a healthy endpoint ejected because a client sent a bad request; a hung endpoint with no
timeout; a retry storm that ignores Retry-After; the client's key leaking to a provider.

Topology (fresh gateway per test, round-robin so the first endpoint in config order is tried
first): cluster ``main`` = endpoints A, B; cluster ``backup`` = endpoint C; model ``m`` on route
``main -> backup``; model ``solo`` on cluster ``alone`` = endpoint A only.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from gateway.app import create_app
from gateway.continuation import EXTENSION_FIELD
from gateway.config import build_settings
from tests.support.scripted import ERROR_EVENT, WORDS, ScriptedUpstream, chunk_event
from tests.support.threads import ServerThread

FULL = "".join(WORDS)
CHAT = {"model": "m", "messages": [{"role": "user", "content": "count"}]}


@pytest.fixture(scope="module")
def upstreams() -> Iterator[dict[str, ScriptedUpstream]]:
    servers = {name: ScriptedUpstream(name).start() for name in ("A", "B", "C")}
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture
def gw(upstreams: dict[str, ScriptedUpstream], monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for server in upstreams.values():
        server.script([("counter", None)])
    monkeypatch.setenv("KVGATE_TEST_C_KEY", "sk-provider-c")
    settings = build_settings(
        {
            "auth": {"api_keys": ["sk-client"]},
            "routing": {"policy": "round-robin"},
            "upstream": {"max_retry_after_s": 0.2, "timeouts": {"first_byte_s": 1.0, "idle_s": 0.5, "total_s": 1.5}},
            "health": {"interval_s": 60},
            "circuit": {"consecutive_failures": 50, "cooldown_s": 30},
            "clusters": {
                "main": {"endpoints": [{"name": "A", "url": upstreams["A"].base_url, "model": "m"},
                                       {"name": "B", "url": upstreams["B"].base_url, "model": "m"}]},
                "backup": {"endpoints": [{"name": "C", "url": upstreams["C"].base_url, "model": "m", "api_key_env": "KVGATE_TEST_C_KEY"}]},
                "alone": {"endpoints": [{"name": "A-alone", "url": upstreams["A"].base_url, "model": "m"}]},
            },
            "routes": {"main-then-backup": {"clusters": ["main", "backup"]}},
            "models": {"m": {"route": "main-then-backup"}, "solo": {"cluster": "alone"}},
        }
    )
    thread = ServerThread.uvicorn(create_app(settings, health_checks=False))
    thread.start()
    yield f"http://127.0.0.1:{thread.port}"
    thread.stop()


def post(gw: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(f"{gw}/v1/chat/completions", json=body, headers={"Authorization": "Bearer sk-client", **headers}, timeout=10)


def stream_events(gw: str, body: dict[str, Any], **headers: str) -> tuple[httpx.Response, list[Any]]:
    """The streamed events, parsed (``[DONE]`` as the string), and the response."""
    with httpx.stream("POST", f"{gw}/v1/chat/completions", json={**body, "stream": True},
                      headers={"Authorization": "Bearer sk-client", **headers}, timeout=10) as response:
        raw = response.read()
    events: list[Any] = []
    for block in raw.split(b"\n\n"):
        if block.startswith(b"data: "):
            data = block[6:]
            events.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
    return response, events


def text_of(events: list[Any]) -> str:
    return "".join(
        (choice.get("delta") or {}).get("content") or ""
        for event in events if isinstance(event, dict) for choice in event.get("choices", [])
    )


# --- before the first byte: transparent failover ---------------------------------------------------

@pytest.mark.parametrize(
    "script, why",
    [
        ([("reset",)], "TCP reset before the status line"),
        ([("close",)], "clean close before the status line"),
        ([("json", 500, {"error": {"message": "boom"}})], "HTTP 500"),
        ([("json", 503, {"error": {"message": "overloaded"}}, {"Retry-After": "30"})], "503 with a long Retry-After (capped)"),
        ([("status", 200), ("reset",)], "200 headers, then reset before any body byte"),
        ([("status", 200), ("end",)], "200 with an empty stream"),
        ([("status", 200), ("chunk", ERROR_EVENT), ("chunk", b"data: [DONE]\n\n"), ("end",)], "in-band error as first event"),
        ([("sleep", 1.5), ("status", 200)], "headers later than first_byte_s"),
        ([("status", 200), ("sleep", 1.5)], "headers, then no first byte within first_byte_s"),
    ],
)
def test_stream_fails_over_before_the_first_byte(gw: str, upstreams: dict[str, ScriptedUpstream], script: list[Any], why: str) -> None:
    upstreams["A"].script(script)
    response, events = stream_events(gw, CHAT)
    assert response.status_code == 200, why
    assert response.headers["x-kvgate-endpoint"] == "B", why
    assert text_of(events) == FULL and events[-1] == "[DONE]", why
    assert not any(EXTENSION_FIELD in e for e in events if isinstance(e, dict)), why


def test_429_honours_retry_after_then_moves_on(gw: str, upstreams: dict[str, ScriptedUpstream]) -> None:
    upstreams["A"].script([("json", 429, {"error": {"message": "slow down"}}, {"Retry-After": "0.1"})])
    response = post(gw, CHAT)
    assert response.status_code == 200 and response.headers["x-kvgate-endpoint"] == "B"


def test_whole_cluster_down_fails_over_to_the_next_cluster(gw: str, upstreams: dict[str, ScriptedUpstream]) -> None:
    upstreams["A"].script([("json", 500, {"error": {"message": "a"}})])
    upstreams["B"].script([("reset",)])
    response = post(gw, CHAT)
    assert response.status_code == 200
    assert response.headers["x-kvgate-cluster"] == "backup" and response.headers["x-kvgate-endpoint"] == "C"
    headers, _ = upstreams["C"].requests[-1]
    assert headers["authorization"] == "Bearer sk-provider-c"  # C's own key, never the client's
    assert all("sk-client" not in str(h) for h, _ in upstreams["A"].requests + upstreams["B"].requests)
    assert all("x-failover-route" not in h for h, _ in upstreams["C"].requests)


def test_client_errors_pass_through_without_retry_or_blame(gw: str, upstreams: dict[str, ScriptedUpstream]) -> None:
    bad = [("json", 400, {"error": {"message": "max_tokens too large", "type": "BadRequestError", "param": None, "code": 400}})]
    upstreams["A"].script(bad)
    upstreams["B"].script(bad)
    for _ in range(6):
        response = post(gw, {**CHAT, "max_tokens": 10**6})
        assert response.status_code == 400
        assert response.json()["error"]["message"] == "max_tokens too large"
    assert len(upstreams["A"].requests) + len(upstreams["B"].requests) == 6  # one attempt each
    assert upstreams["C"].requests == []
    metrics = httpx.get(f"{gw}/metrics").text
    assert "kvgate_upstream_failures_total{" not in metrics
    upstreams["A"].script([("counter", None)])
    upstreams["B"].script([("counter", None)])
    assert post(gw, CHAT).status_code == 200  # nobody was ejected


def test_non_stream_total_timeout_is_504_after_every_attempt(gw: str, upstreams: dict[str, ScriptedUpstream]) -> None:
    for name in ("A", "B", "C"):
        upstreams[name].script([("sleep", 3)])
    response = post(gw, CHAT)
    assert response.status_code == 504
    assert response.json()["error"]["code"] == "upstream_timeout"


def test_every_failure_is_an_openai_error_never_an_empty_200(gw: str, upstreams: dict[str, ScriptedUpstream]) -> None:
    for name in ("A", "B", "C"):
        upstreams[name].script([("status", 200), ("end",)])
    response, events = stream_events(gw, CHAT)
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_error"
    assert events == []


# --- after content was sent: continuation or an honest error ----------------------------------------

@pytest.mark.parametrize(
    "fault, why",
    [
        ([("reset",)], "TCP reset mid-stream"),
        ([("close",)], "clean close without [DONE]"),
        ([("chunk", ERROR_EVENT), ("chunk", b"data: [DONE]\n\n"), ("end",)], "engine died: in-band error, HTTP 200"),
        ([("chunk", ERROR_EVENT + b"data: [DONE]\n\n"), ("end",)], "in-band error and [DONE] in one read"),
        ([("sleep", 1.5)], "silence longer than idle_s"),
    ],
)
def test_mid_stream_failure_is_continued_on_another_endpoint(
    gw: str, upstreams: dict[str, ScriptedUpstream], fault: list[Any], why: str
) -> None:
    upstreams["A"].script([("counter", 3), *fault])
    response, events = stream_events(gw, {**CHAT, "max_tokens": 20, "stream_options": {"include_usage": True}})
    assert response.status_code == 200, why
    assert text_of(events) == FULL, why  # no lost and no repeated text
    assert events[-1] == "[DONE]", why
    chunks = [e for e in events if isinstance(e, dict)]
    assert {e["id"] for e in chunks} == {"chatcmpl-up"} and {e["created"] for e in chunks} == {42}
    assert not any("error" in e for e in chunks), why
    continued = [e for e in chunks if EXTENSION_FIELD in e]
    assert continued and continued[0][EXTENSION_FIELD] == {"hop": 1, "endpoint": "B"}
    assert sum(1 for e in chunks for c in e.get("choices", []) if c.get("delta", {}).get("role")) == 1
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens"] == 10
    _, continuation = upstreams["B"].requests[-1]
    assert continuation["continue_final_message"] is True and continuation["add_generation_prompt"] is False
    assert continuation["messages"][-1] == {"role": "assistant", "content": "".join(WORDS[:3])}
    assert continuation["max_tokens"] == 17
    metrics = httpx.get(f"{gw}/metrics").text
    assert 'kvgate_stream_continuations_total{cluster="main"} 1.0' in metrics


@pytest.mark.parametrize("usage", [True, False])
@pytest.mark.parametrize("cut", [("reset",), ("close",)])
def test_break_after_the_finish_reason_ends_the_stream_once(
    gw: str, upstreams: dict[str, ScriptedUpstream], usage: bool, cut: tuple[str]
) -> None:
    # role + 10 words + the finish chunk went out; the usage chunk and [DONE] never come
    upstreams["A"].script([("counter", 11), cut])
    extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if usage else {}
    response, events = stream_events(gw, {**CHAT, "max_tokens": 20, **extra})
    assert response.status_code == 200
    chunks = [e for e in events if isinstance(e, dict)]
    assert text_of(events) == FULL
    assert [c["finish_reason"] for e in chunks for c in e.get("choices", []) if c.get("finish_reason")] == ["stop"]
    assert not any("error" in e or EXTENSION_FIELD in e for e in chunks)
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    assert upstreams["B"].requests == []  # never continued: that would repeat the end
    assert not any("usage" in e and e["usage"] for e in chunks)  # only the endpoint could count it


def test_break_with_the_budget_spent_but_no_finish_is_an_error(gw: str, upstreams: dict[str, ScriptedUpstream]) -> None:
    upstreams["A"].script([("counter", 10), ("reset",)])  # every token of max_tokens, no finish chunk
    response, events = stream_events(gw, {**CHAT, "max_tokens": 10})
    assert response.status_code == 200
    assert text_of(events) == FULL
    assert isinstance(events[-1], dict) and events[-1]["error"]["code"] == "upstream_error"
    assert "[DONE]" not in events and upstreams["B"].requests == []


def test_official_sdk_reads_a_continued_stream_as_one_answer(gw: str, upstreams: dict[str, ScriptedUpstream]) -> None:
    upstreams["A"].script([("counter", 4), ("reset",)])
    client = openai.OpenAI(base_url=f"{gw}/v1", api_key="sk-client", max_retries=0)
    stream = client.chat.completions.create(model="m", messages=CHAT["messages"], stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    client.close()
    assert text == FULL


@pytest.mark.parametrize(
    "extra, why",
    [
        ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]}, "tool calls are never continued"),
        ({"response_format": {"type": "json_object"}}, "strict JSON is never continued"),
    ],
)
def test_not_continued_gets_an_error_event_and_no_fake_end(gw: str, upstreams: dict[str, ScriptedUpstream], extra: dict[str, Any], why: str) -> None:
    upstreams["A"].script([("counter", 3), ("reset",)])
    response, events = stream_events(gw, {**CHAT, **extra})
    assert response.status_code == 200, why
    assert text_of(events) == "".join(WORDS[:3]), why
    assert isinstance(events[-1], dict) and events[-1]["error"]["code"] == "upstream_error", why
    assert "[DONE]" not in events and not any(c.get("finish_reason") for e in events if isinstance(e, dict) for c in e.get("choices", [])), why
    assert upstreams["B"].requests == [], why


def test_no_other_endpoint_relays_the_engines_own_error_event(gw: str, upstreams: dict[str, ScriptedUpstream]) -> None:
    upstreams["A"].script([("counter", 2), ("chunk", ERROR_EVENT), ("chunk", b"data: [DONE]\n\n"), ("end",)])
    response, events = stream_events({**{}, **{"gw": gw}}["gw"], {**CHAT, "model": "solo"})
    assert response.status_code == 200
    assert text_of(events) == "".join(WORDS[:2])
    assert events[-1]["error"]["message"] == "EngineCore encountered an issue"
    assert "[DONE]" not in events


def test_long_healthy_stream_is_not_cut_by_the_total_limit(gw: str, upstreams: dict[str, ScriptedUpstream]) -> None:
    steps: list[Any] = [("status", 200), ("chunk", chunk_event(role=True))]
    for word in WORDS:  # 10 x 0.3 s = 3 s > total_s (1.5 s); each gap < idle_s (0.5 s)
        steps += [("sleep", 0.3), ("chunk", chunk_event(word))]
    steps += [("chunk", chunk_event(finish="stop")), ("chunk", b"data: [DONE]\n\n"), ("end",)]
    upstreams["A"].script(steps)
    response, events = stream_events(gw, CHAT)
    assert text_of(events) == FULL and events[-1] == "[DONE]"
    assert response.headers["x-kvgate-endpoint"] == "A"


# --- X-Failover-Route ----------------------------------------------------------------------------

@pytest.mark.parametrize(
    "header, endpoint, route",
    [
        ("true", "C", "main-then-backup; reason=header:true"),
        ("backup", "C", "backup; reason=header:route"),
        ("main-then-backup", "A", "main-then-backup; reason=header:route"),
    ],
)
def test_failover_route_header_selects_the_route(gw: str, header: str, endpoint: str, route: str) -> None:
    response = post(gw, CHAT, **{"X-Failover-Route": header})
    assert response.status_code == 200
    assert response.headers["x-kvgate-endpoint"] == endpoint
    assert response.headers["x-kvgate-route"] == route


def test_failover_route_false_disables_failover(gw: str, upstreams: dict[str, ScriptedUpstream]) -> None:
    upstreams["A"].script([("json", 500, {"error": {"message": "down"}})])
    response = post(gw, CHAT, **{"X-Failover-Route": "false"})
    assert response.status_code == 502
    assert upstreams["B"].requests == [] and upstreams["C"].requests == []


@pytest.mark.parametrize("header", ["maybe", "FAST", "1"])
def test_failover_route_header_garbage_is_400(gw: str, header: str) -> None:
    response = post(gw, CHAT, **{"X-Failover-Route": header})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "X-Failover-Route"


def test_every_breaker_open_is_503_with_retry_after(upstreams: dict[str, ScriptedUpstream]) -> None:
    settings = build_settings(
        {
            "circuit": {"consecutive_failures": 1, "cooldown_s": 30},
            "health": {"interval_s": 60},
            "clusters": {"alone": {"endpoints": [{"url": upstreams["A"].base_url, "model": "m"}]}},
            "models": {"solo": {"cluster": "alone"}},
        }
    )
    upstreams["A"].script([("json", 500, {"error": {"message": "down"}})])
    thread = ServerThread.uvicorn(create_app(settings, health_checks=False))
    thread.start()
    try:
        url = f"http://127.0.0.1:{thread.port}/v1/chat/completions"
        first = httpx.post(url, json={**CHAT, "model": "solo"}, timeout=10)
        second = httpx.post(url, json={**CHAT, "model": "solo"}, timeout=10)
    finally:
        thread.stop()
    assert first.status_code == 502
    assert second.status_code == 503
    assert second.json()["error"]["code"] == "no_healthy_endpoint"
    assert 25 <= int(second.headers["retry-after"]) <= 30
    assert len(upstreams["A"].requests) == 1  # the open breaker kept the second request away
