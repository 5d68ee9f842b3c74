"""Response headers kvgate adds, and the headers an endpoint receives (never the client's key)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from gateway.app import create_app
from gateway.config import ConfigError, build_settings
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway, chat_body

CHAT = "/v1/chat/completions"
GENERATED_ID = re.compile(r"[0-9a-f]{32}")

# (id, method, path, json body, expected status)
REQUESTS = [
    ("chat", "POST", CHAT, chat_body(), 200),
    ("chat-stream", "POST", CHAT, chat_body(stream=True), 200),
    ("completion", "POST", "/v1/completions", {"model": "qwen-fast", "prompt": "x"}, 200),
    ("models", "GET", "/v1/models", None, 200),
    ("health", "GET", "/health", None, 200),
    ("metrics", "GET", "/metrics", None, 200),
    ("bad-request", "POST", CHAT, {"model": "qwen-fast"}, 400),
    ("unknown-model", "POST", CHAT, chat_body(model="nope"), 404),
    ("unknown-path", "GET", "/v1/nope", None, 404),
    ("wrong-method", "GET", CHAT, None, 405),
    ("upstream-400", "POST", CHAT, chat_body(fake="status:400"), 400),
    ("upstream-500", "POST", CHAT, chat_body(fake="status:500"), 502),
    ("refused", "POST", CHAT, chat_body(model="dead"), 502),
    ("refused-stream", "POST", CHAT, chat_body(model="dead", stream=True), 502),
]


@pytest.mark.parametrize(("method", "path", "body", "status"), [r[1:] for r in REQUESTS], ids=[r[0] for r in REQUESTS])
def test_every_response_has_a_request_id(
    gateway: RunningGateway, http: httpx.Client, method: str, path: str, body: object, status: int
) -> None:
    generated = http.request(method, gateway.url + path, json=body)
    assert generated.status_code == status
    assert GENERATED_ID.fullmatch(generated.headers["x-request-id"]), generated.headers
    again = http.request(method, gateway.url + path, json=body)
    assert again.headers["x-request-id"] != generated.headers["x-request-id"]
    sane = f"client-{method}:1.a_B-{status}" + "x" * 100
    assert len(sane) <= 128
    honoured = http.request(method, gateway.url + path, json=body, headers={"X-Request-Id": sane})
    assert honoured.status_code == status
    assert honoured.headers["x-request-id"] == sane


@pytest.mark.parametrize(
    "incoming",
    ["has space", "semi;colon", "x" * 129, "é-unicode", "<script>", "a/b"],
    ids=["space", "semicolon", "too-long", "non-ascii", "markup", "slash"],
)
def test_insane_request_id_is_replaced(gateway: RunningGateway, http: httpx.Client, incoming: str) -> None:
    response = http.post(gateway.url + CHAT, json=chat_body(), headers={"X-Request-Id": incoming.encode()})
    assert response.status_code == 200
    assert GENERATED_ID.fullmatch(response.headers["x-request-id"])


def test_request_id_reaches_the_endpoint(gateway: RunningGateway, fake_a: FakeUpstream, http: httpx.Client) -> None:
    response = http.post(gateway.url + CHAT, json=chat_body(), headers={"X-Request-Id": "trace-me-42"})
    assert response.headers["x-request-id"] == "trace-me-42"
    assert fake_a.last["headers"]["x-request-id"] == "trace-me-42"
    generated = http.post(gateway.url + CHAT, json=chat_body(), headers={"X-Request-Id": "not sane"})
    assert fake_a.last["headers"]["x-request-id"] == generated.headers["x-request-id"]


@pytest.mark.parametrize(
    ("model", "cluster", "endpoint"),
    [("qwen-fast", "fast", "fast-a"), ("fast-alias", "fast", "fast-a"), ("fast", "fast", "fast-a"), ("r1", "reasoning", "reason-a")],
)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_route_headers_on_inference_responses(
    gateway: RunningGateway, http: httpx.Client, model: str, cluster: str, endpoint: str, stream: bool
) -> None:
    response = http.post(gateway.url + CHAT, json=chat_body(model=model, stream=stream))
    assert response.status_code == 200
    assert response.headers["x-kvgate-cluster"] == cluster
    assert response.headers["x-kvgate-endpoint"] == endpoint
    assert response.headers["x-request-id"]


def test_client_headers_never_reach_the_endpoint(gateway: RunningGateway, fake_a: FakeUpstream, http: httpx.Client) -> None:
    response = http.post(
        gateway.url + CHAT,
        json=chat_body(),
        headers={"Authorization": "Bearer sk-client-secret", "Cookie": "session=1", "OpenAI-Organization": "org-x"},
    )
    assert response.status_code == 200
    sent = fake_a.last["headers"]
    assert "authorization" not in sent
    assert "cookie" not in sent
    assert "openai-organization" not in sent
    assert "sk-client-secret" not in repr(fake_a.last)


@pytest.fixture
def keyed_gateway(monkeypatch: pytest.MonkeyPatch, fake_b: FakeUpstream) -> Iterator[RunningGateway]:
    monkeypatch.setenv("KVGATE_TEST_ENDPOINT_KEY", "sk-endpoint-own-key")
    gateway = RunningGateway(
        {
            "auth": {"api_keys": ["sk-client-key-1"]},
            "clusters": {
                "paid": {"endpoints": [{"name": "paid-0", "url": fake_b.base_url, "model": "paid", "api_key_env": "KVGATE_TEST_ENDPOINT_KEY"}]}
            },
        }
    ).start()
    yield gateway
    gateway.stop()


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_endpoint_gets_its_own_key_not_the_clients(
    keyed_gateway: RunningGateway, fake_b: FakeUpstream, http: httpx.Client, stream: bool
) -> None:
    response = http.post(
        keyed_gateway.url + CHAT, json=chat_body(model="paid", stream=stream), headers={"Authorization": "Bearer sk-client-key-1"}
    )
    assert response.status_code == 200
    assert fake_b.last["headers"]["authorization"] == "Bearer sk-endpoint-own-key"
    assert "sk-client-key-1" not in repr(fake_b.last)


def test_unset_endpoint_key_is_refused_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVGATE_TEST_MISSING_KEY", raising=False)
    settings = build_settings(
        {"clusters": {"paid": {"endpoints": [{"url": "http://127.0.0.1:9/v1", "model": "m", "api_key_env": "KVGATE_TEST_MISSING_KEY"}]}}}
    )
    with pytest.raises(ConfigError, match=r"clusters\.paid\.endpoints\.0\.api_key_env: .*KVGATE_TEST_MISSING_KEY"):
        create_app(settings)
