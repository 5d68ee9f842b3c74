"""Every error kvgate answers: exact status, OpenAI error shape, and who gets blamed for it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.integration.conftest import CLIENT_KEY, MAX_BODY
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RefusingPort, RunningGateway, chat_body, error_shape_ok

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


def _error(response: httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/json"), response.headers
    payload = response.json()
    assert error_shape_ok(payload), payload
    return payload["error"]


def _json(value: Any) -> bytes:
    return orjson.dumps(value)


MESSAGES = [{"role": "user", "content": "hi"}]

# (id, path, raw body, status, error.param, error.code)
INVALID_REQUESTS = [
    ("malformed-json", CHAT, b'{"model": "qwen-fast", ', 400, None, None),
    ("empty-body", CHAT, b"", 400, None, None),
    ("body-is-array", CHAT, _json([{"model": "qwen-fast"}]), 400, None, None),
    ("body-is-string", CHAT, _json("qwen-fast"), 400, None, None),
    ("missing-model", CHAT, _json({"messages": MESSAGES}), 400, "model", None),
    ("model-null", CHAT, _json({"model": None, "messages": MESSAGES}), 400, "model", None),
    ("model-int", CHAT, _json({"model": 7, "messages": MESSAGES}), 400, "model", None),
    ("model-list", CHAT, _json({"model": ["qwen-fast"], "messages": MESSAGES}), 400, "model", None),
    ("model-empty", CHAT, _json({"model": "", "messages": MESSAGES}), 400, "model", None),
    ("missing-messages", CHAT, _json({"model": "qwen-fast"}), 400, "messages", None),
    ("messages-string", CHAT, _json({"model": "qwen-fast", "messages": "hi"}), 400, "messages", None),
    ("messages-object", CHAT, _json({"model": "qwen-fast", "messages": {"role": "user"}}), 400, "messages", None),
    ("messages-empty", CHAT, _json({"model": "qwen-fast", "messages": []}), 400, "messages", None),
    ("message-not-object", CHAT, _json({"model": "qwen-fast", "messages": ["hi"]}), 400, "messages[0]", None),
    ("message-without-role", CHAT, _json({"model": "qwen-fast", "messages": [{"content": "hi"}]}), 400, "messages[0].role", None),
    (
        "second-message-role-int",
        CHAT,
        _json({"model": "qwen-fast", "messages": [*MESSAGES, {"role": 3, "content": "x"}]}),
        400,
        "messages[1].role",
        None,
    ),
    ("stream-string", CHAT, _json({"model": "qwen-fast", "messages": MESSAGES, "stream": "yes"}), 400, "stream", None),
    ("stream-int", CHAT, _json({"model": "qwen-fast", "messages": MESSAGES, "stream": 1}), 400, "stream", None),
    (
        "stream-options-list",
        CHAT,
        _json({"model": "qwen-fast", "messages": MESSAGES, "stream": True, "stream_options": [1]}),
        400,
        "stream_options",
        None,
    ),
    ("user-int", CHAT, _json({"model": "qwen-fast", "messages": MESSAGES, "user": 5}), 400, "user", None),
    (
        "prompt-cache-key-object",
        CHAT,
        _json({"model": "qwen-fast", "messages": MESSAGES, "prompt_cache_key": {}}),
        400,
        "prompt_cache_key",
        None,
    ),
    ("missing-prompt", COMPLETIONS, _json({"model": "qwen-fast"}), 400, "prompt", None),
    ("prompt-int", COMPLETIONS, _json({"model": "qwen-fast", "prompt": 5}), 400, "prompt", None),
    ("prompt-null", COMPLETIONS, _json({"model": "qwen-fast", "prompt": None}), 400, "prompt", None),
    ("prompt-empty-list", COMPLETIONS, _json({"model": "qwen-fast", "prompt": []}), 400, "prompt", None),
    ("prompt-mixed-list", COMPLETIONS, _json({"model": "qwen-fast", "prompt": ["a", 1]}), 400, "prompt", None),
    ("prompt-bool-tokens", COMPLETIONS, _json({"model": "qwen-fast", "prompt": [True, False]}), 400, "prompt", None),
    ("completion-stream-string", COMPLETIONS, _json({"model": "qwen-fast", "prompt": "x", "stream": "no"}), 400, "stream", None),
    ("unknown-model", CHAT, _json({"model": "gpt-nope", "messages": MESSAGES}), 404, "model", "model_not_found"),
    ("model-wrong-case", CHAT, _json({"model": "Qwen-Fast", "messages": MESSAGES}), 404, "model", "model_not_found"),
    ("unknown-model-completions", COMPLETIONS, _json({"model": "gpt-nope", "prompt": "x"}), 404, "model", "model_not_found"),
]


@pytest.mark.parametrize(
    ("path", "raw", "status", "param", "code"),
    [case[1:] for case in INVALID_REQUESTS],
    ids=[case[0] for case in INVALID_REQUESTS],
)
def test_invalid_request_is_refused_before_any_upstream(
    gateway: RunningGateway, fake_a: FakeUpstream, http: httpx.Client, path: str, raw: bytes, status: int, param: str | None, code: str | None
) -> None:
    seen = len(fake_a.requests)
    response = http.post(gateway.url + path, content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == status, response.text
    error = _error(response)
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["code"] == code
    assert response.headers.get("x-request-id")
    assert len(fake_a.requests) == seen


@pytest.mark.parametrize(
    "prompt",
    ["one string", ["two", "strings"], [1, 2, 3], [[1, 2], [3]]],
    ids=["string", "strings", "tokens", "token-lists"],
)
def test_valid_prompt_shapes_are_accepted(gateway: RunningGateway, http: httpx.Client, prompt: Any) -> None:
    response = http.post(gateway.url + COMPLETIONS, json={"model": "qwen-fast", "prompt": prompt})
    assert response.status_code == 200, response.text
    assert response.json()["object"] == "text_completion"


# --- authentication ---------------------------------------------------------------------------

AUTH_CASES = [
    ("missing", None, 401),
    ("empty", "", 401),
    ("wrong-key", "Bearer sk-kvgate-test-wrong-key", 401),
    ("not-bearer", f"Basic {CLIENT_KEY}", 401),
    ("bearer-without-key", "Bearer", 401),
    ("right-key", f"Bearer {CLIENT_KEY}", 200),
    ("right-key-lowercase-scheme", f"bearer {CLIENT_KEY}", 200),
]


@pytest.mark.parametrize(("authorization", "status"), [c[1:] for c in AUTH_CASES], ids=[c[0] for c in AUTH_CASES])
@pytest.mark.parametrize(
    ("method", "path", "body"),
    [("POST", CHAT, chat_body()), ("POST", COMPLETIONS, {"model": "qwen-fast", "prompt": "x"}), ("GET", "/v1/models", None)],
    ids=["chat", "completions", "models"],
)
def test_client_keys_guard_the_api(
    auth_gateway: RunningGateway, http: httpx.Client, method: str, path: str, body: Any, authorization: str | None, status: int
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    response = http.request(method, auth_gateway.url + path, json=body, headers=headers)
    assert response.status_code == status, response.text
    if status == 401:
        error = _error(response)
        assert error["code"] == "invalid_api_key"
        assert error["type"] == "invalid_request_error"
        assert CLIENT_KEY not in response.text
        assert response.headers.get("x-request-id")


def test_auth_comes_before_body_validation(auth_gateway: RunningGateway, http: httpx.Client) -> None:
    response = http.post(auth_gateway.url + CHAT, content=b"{not json")
    assert response.status_code == 401
    assert _error(response)["code"] == "invalid_api_key"


def test_health_is_not_guarded(auth_gateway: RunningGateway, http: httpx.Client) -> None:
    response = http.get(auth_gateway.url + "/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_health_answers_head_for_load_balancer_probes(auth_gateway: RunningGateway, http: httpx.Client) -> None:
    response = http.head(auth_gateway.url + "/health")  # a fresh-clone trial found 405 here
    assert response.status_code == 200
    assert response.content == b""


# --- body size ---------------------------------------------------------------------------------


def _padded(size: int) -> bytes:
    """A valid chat body of exactly ``size`` bytes."""
    base = _json(chat_body(pad=""))
    return _json(chat_body(pad="x" * (size - len(base))))


def test_body_at_the_limit_is_accepted(gateway: RunningGateway, http: httpx.Client) -> None:
    raw = _padded(MAX_BODY)
    assert len(raw) == MAX_BODY
    response = http.post(gateway.url + CHAT, content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text


def test_body_over_the_limit_with_content_length_is_413(gateway: RunningGateway, fake_a: FakeUpstream, http: httpx.Client) -> None:
    seen = len(fake_a.requests)
    raw = _padded(MAX_BODY + 1)
    response = http.post(gateway.url + CHAT, content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    error = _error(response)
    assert error["code"] == "request_too_large"
    assert str(MAX_BODY) in error["message"]
    assert len(fake_a.requests) == seen


def test_body_over_the_limit_chunked_is_413(gateway: RunningGateway, fake_a: FakeUpstream, http: httpx.Client) -> None:
    seen = len(fake_a.requests)
    raw = _padded(MAX_BODY * 2)

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(raw), 1000):
            yield raw[start : start + 1000]

    response = http.post(gateway.url + CHAT, content=chunks(), headers={"Content-Type": "application/json"})
    assert response.request.headers.get("transfer-encoding") == "chunked"
    assert "content-length" not in response.request.headers
    assert response.status_code == 413
    assert _error(response)["code"] == "request_too_large"
    assert len(fake_a.requests) == seen


# --- routes ------------------------------------------------------------------------------------

ROUTE_CASES = [
    ("GET", "/v1/nope", 404, "not_found"),
    ("POST", "/v1/nope", 404, "not_found"),
    ("GET", "/", 404, "not_found"),
    ("POST", "/v1/embeddings-not-here", 404, "not_found"),
    ("GET", CHAT, 405, "method_not_allowed"),
    ("PUT", COMPLETIONS, 405, "method_not_allowed"),
    ("DELETE", "/v1/models", 405, "method_not_allowed"),
    ("POST", "/health", 405, "method_not_allowed"),
]


@pytest.mark.parametrize(("method", "path", "status", "code"), ROUTE_CASES, ids=[f"{c[0]}-{c[1]}" for c in ROUTE_CASES])
def test_unknown_path_and_wrong_method_are_openai_shaped(
    gateway: RunningGateway, http: httpx.Client, method: str, path: str, status: int, code: str
) -> None:
    response = http.request(method, gateway.url + path)
    assert response.status_code == status
    error = _error(response)
    assert error["code"] == code
    assert error["type"] == "invalid_request_error"
    assert response.headers.get("x-request-id")


# --- upstream errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize("status", [400, 404, 422])
def test_upstream_client_error_is_relayed_and_not_blamed_on_the_endpoint(
    gateway: RunningGateway, fake_a: FakeUpstream, http: httpx.Client, status: int, stream: bool
) -> None:
    failures = gateway.metric("kvgate_upstream_failures_total", endpoint="fast-a")
    client_errors = gateway.metric("kvgate_requests_total", endpoint="fast-a", outcome="client_error")
    seen = len(fake_a.requests)
    response = http.post(gateway.url + CHAT, json=chat_body(fake=f"status:{status}", stream=stream))
    assert response.status_code == status
    error = _error(response)
    assert error["message"] == f"fake upstream says {status}"
    assert len(fake_a.requests) == seen + 1  # never retried
    assert gateway.metric("kvgate_upstream_failures_total", endpoint="fast-a") == failures
    assert gateway.metric("kvgate_requests_total", endpoint="fast-a", outcome="client_error") == client_errors + 1


@pytest.mark.parametrize("style", ["text", "flat"])
def test_upstream_client_error_in_another_shape_becomes_openai_shaped(
    gateway: RunningGateway, http: httpx.Client, style: str
) -> None:
    response = http.post(gateway.url + CHAT, json=chat_body(fake=f"status:400:{style}"))
    assert response.status_code == 400
    error = _error(response)
    assert error["type"] == "invalid_request_error"
    assert error["message"] == "fake upstream says 400"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
@pytest.mark.parametrize(("upstream_status", "status", "code"), [(500, 502, "upstream_error"), (503, 502, "upstream_error"), (504, 504, "upstream_timeout")])
def test_upstream_server_error_becomes_gateway_error(
    gateway: RunningGateway, http: httpx.Client, upstream_status: int, status: int, code: str, stream: bool
) -> None:
    failures = gateway.metric("kvgate_upstream_failures_total", endpoint="fast-a", reason=f"http_{upstream_status}")
    response = http.post(gateway.url + CHAT, json=chat_body(fake=f"status:{upstream_status}", stream=stream))
    assert response.status_code == status
    error = _error(response)
    assert error["type"] == "server_error"
    assert error["code"] == code
    assert "fast-a" in error["message"]
    assert f"HTTP {upstream_status}" in error["message"]
    assert "127.0.0.1" not in error["message"]  # never the endpoint's URL
    assert gateway.metric("kvgate_upstream_failures_total", endpoint="fast-a", reason=f"http_{upstream_status}") == failures + 1


def test_upstream_429_is_relayed_with_retry_after_after_trying_every_endpoint(
    failover_gateway: RunningGateway, fake_a: FakeUpstream, fake_b: FakeUpstream, http: httpx.Client
) -> None:
    seen_a, seen_b = len(fake_a.requests), len(fake_b.requests)
    response = http.post(failover_gateway.url + CHAT, json=chat_body(model="pair", fake="status:429"))
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    assert _error(response)["message"] == "fake upstream says 429"
    assert (len(fake_a.requests), len(fake_b.requests)) == (seen_a + 1, seen_b + 1)
    assert failover_gateway.metric("kvgate_upstream_failures_total", reason="http_429") >= 2


def test_upstream_429_on_a_single_endpoint(gateway: RunningGateway, http: httpx.Client) -> None:
    response = http.post(gateway.url + CHAT, json=chat_body(fake="status:429"))
    assert response.status_code == 429
    assert response.headers["retry-after"] == "7"
    _error(response)


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_connection_refused_is_502(gateway: RunningGateway, refusing: RefusingPort, http: httpx.Client, stream: bool) -> None:
    failures = gateway.metric("kvgate_upstream_failures_total", endpoint="dead-0", reason="connect")
    response = http.post(gateway.url + CHAT, json=chat_body(model="dead", stream=stream))
    assert response.status_code == 502
    error = _error(response)
    assert error["code"] == "upstream_error"
    assert "dead-0" in error["message"]
    assert "127.0.0.1" not in error["message"], "the endpoint's address leaked to the client"
    assert f":{refusing.port}" not in error["message"] and f", {refusing.port})" not in error["message"]
    assert "refused" in error["message"].lower()
    assert gateway.metric("kvgate_upstream_failures_total", endpoint="dead-0", reason="connect") == failures + 1
    assert gateway.metric("kvgate_endpoint_in_flight", endpoint="dead-0") == 0


@pytest.mark.parametrize(("script", "reason"), [("first_error", "stream_error"), ("empty_stream", "empty_body")])
def test_stream_that_fails_before_its_first_token_is_502_not_200(
    gateway: RunningGateway, http: httpx.Client, script: str, reason: str
) -> None:
    failures = gateway.metric("kvgate_upstream_failures_total", endpoint="fast-a", reason=reason)
    upstream_errors = gateway.metric("kvgate_requests_total", endpoint="fast-a", outcome="upstream_error")
    with http.stream("POST", gateway.url + CHAT, json=chat_body(fake=script, stream=True)) as response:
        body = response.read()
    assert response.status_code == 502, body
    assert body
    error = _error(response)
    assert error["code"] == "upstream_error"
    assert gateway.metric("kvgate_upstream_failures_total", endpoint="fast-a", reason=reason) == failures + 1
    assert gateway.metric("kvgate_requests_total", endpoint="fast-a", outcome="upstream_error") == upstream_errors + 1
    assert gateway.metric("kvgate_endpoint_in_flight", endpoint="fast-a") == 0


@pytest.mark.parametrize(
    ("script", "stream"),
    [("hang", False), ("hang", True), ("stall", False), ("stall", True)],
    ids=["no-headers", "no-headers-stream", "no-body", "no-first-chunk"],
)
def test_endpoint_that_never_answers_is_504_not_200(
    timeout_gateway: RunningGateway, fake_a: FakeUpstream, http: httpx.Client, script: str, stream: bool
) -> None:
    with http.stream("POST", timeout_gateway.url + CHAT, json=chat_body(model="slow", fake=script, stream=stream)) as response:
        response.read()
    assert response.status_code == 504
    error = _error(response)
    assert error["code"] == "upstream_timeout"
    assert "slow-a" in error["message"]
    assert timeout_gateway.metric("kvgate_endpoint_in_flight", endpoint="slow-a") == 0


def test_every_endpoint_refusing_a_stream_is_never_an_empty_200(
    failover_gateway: RunningGateway, http: httpx.Client
) -> None:
    with http.stream("POST", failover_gateway.url + CHAT, json=chat_body(model="pair", fake="empty_stream", stream=True)) as response:
        response.read()
    assert response.status_code == 502
    assert _error(response)["code"] == "upstream_error"


# --- unexpected errors -------------------------------------------------------------------------


class _ExplodingUpstream:
    """An Upstream whose ``post`` raises something the gateway does not expect."""

    async def post(self, url: str, body: bytes, headers: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    async def probe(self, url: str, timeout_s: float) -> int:
        return 200

    async def aclose(self) -> None:
        return None


@pytest.fixture(scope="module")
def exploding_gateway(fake_a: FakeUpstream) -> Iterator[RunningGateway]:
    gateway = RunningGateway(
        {"clusters": {"fast": {"endpoints": [{"name": "boom-0", "url": fake_a.base_url, "model": "m"}]}}},
        upstream=_ExplodingUpstream(),
    ).start()
    yield gateway
    gateway.stop()


def test_unexpected_error_is_an_openai_shaped_500_with_request_id(
    exploding_gateway: RunningGateway, http: httpx.Client
) -> None:
    response = http.post(exploding_gateway.url + CHAT, json=chat_body(model="fast"), headers={"X-Request-Id": "boom-req-1"})
    assert response.status_code == 500
    error = _error(response)
    assert error["type"] == "server_error"
    assert "boom" not in error["message"]  # internals are logged, not shown
    assert exploding_gateway.metric("kvgate_endpoint_in_flight", endpoint="boom-0") == 0
    assert response.headers.get("x-request-id") == "boom-req-1"
