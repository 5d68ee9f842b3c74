"""The low-severity holes of issue 17, over real sockets: credentials in messages and views, the
trailing-slash redirect built from the client's ``Host``, and WebSocket upgrades never answered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from gateway.config import ConfigError, build_settings
from tests.support.gateway import RunningGateway
from tests.support.ops import ADMIN_KEY, admin, toml_config
from tests.support.security_edge import read_all, slow_socket

SECRET, TOKEN = "pw-s3cret-9f2", "tok-77aa31"
LEAKY = f"http://admin:{SECRET}@127.0.0.1:9/v1/caf\u00e9?token={TOKEN}"


def _config(url: str = "http://127.0.0.1:9/v1", **server: Any) -> dict[str, Any]:
    return {
        "server": server,
        "admin": {"api_key": ADMIN_KEY},
        "health": {"interval_s": 60},
        "clusters": {"pool": {"endpoints": [{"name": "e", "url": url, "model": "m"}]}},
        "models": {"m": {"cluster": "pool"}},
    }


def test_a_config_error_never_echoes_credentials() -> None:
    with pytest.raises(ConfigError) as raised:
        build_settings(_config(LEAKY))
    message = str(raised.value)
    assert "clusters.pool.endpoints.0.url" in message
    assert SECRET not in message and TOKEN not in message and "***" in message


def test_admin_reload_never_echoes_credentials(tmp_path: Path) -> None:
    path = tmp_path / "kvgate.toml"
    path.write_text(toml_config(_config()))
    gateway = RunningGateway(_config(), config_path=path, health_checks=False).start()
    try:
        path.write_text(toml_config(_config(LEAKY)))
        answer = httpx.post(gateway.url + "/admin/reload", headers=admin(), timeout=10)
        assert answer.status_code >= 400, answer.text
        assert "endpoints.0.url" in answer.text
        assert SECRET not in answer.text and TOKEN not in answer.text
    finally:
        gateway.stop()


def test_admin_endpoints_masks_a_config_url_password() -> None:
    gateway = RunningGateway(_config(f"http://admin:{SECRET}@127.0.0.1:9/v1"), health_checks=False).start()
    try:
        answer = httpx.get(gateway.url + "/admin/endpoints", headers=admin(), timeout=10)
        assert answer.status_code == 200
        assert SECRET not in answer.text
        assert answer.json()["data"][0]["url"] == "http://***@127.0.0.1:9/v1"
        one = httpx.get(gateway.url + "/admin/endpoints/e", headers=admin(), timeout=10)
        assert SECRET not in one.text
    finally:
        gateway.stop()


@pytest.fixture(scope="module", params=["raw-door", "asgi-door"])
def doors(request: pytest.FixtureRequest) -> Iterator[RunningGateway]:
    door = "raw" if request.param == "raw-door" else "asgi"
    gateway = RunningGateway(_config(access_log=request.param == "asgi-door"), door=door, health_checks=False).start()
    yield gateway
    gateway.stop()


def test_the_trailing_slash_never_redirects_to_the_clients_host(doors: RunningGateway) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    answer = httpx.post(doors.base_url + "/chat/completions/", json=body, headers={"Host": "evil.example"}, timeout=10)
    assert answer.status_code == 404, answer.text
    assert "location" not in answer.headers
    assert "error" in answer.json()


@pytest.mark.parametrize("method", ["POST", "GET"])
def test_a_websocket_upgrade_is_answered_400(doors: RunningGateway, method: str) -> None:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}) if method == "POST" else b""
    head = (
        f"{method} /v1/chat/completions HTTP/1.1\r\nHost: kvgate\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with slow_socket(doors.port, head + body, timeout_s=5.0) as sock:
        answer = read_all(sock)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert orjson.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "upgrade_not_supported"


@pytest.mark.parametrize("request_bytes", [
    b"GARBAGE\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: kvgate\r\nX-Request-Id: \x01\x02abc\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: kvgate\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: kvgate\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
], ids=["request-line", "control-byte-in-header", "chunked-and-length", "bad-chunk-size"])
def test_a_request_http_cannot_parse_gets_an_openai_shaped_400(doors: RunningGateway, request_bytes: bytes) -> None:
    with slow_socket(doors.port, request_bytes, timeout_s=5.0) as sock:
        answer = read_all(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"content-type: application/json" in head.lower()
    error = orjson.loads(body)["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_http_request"
