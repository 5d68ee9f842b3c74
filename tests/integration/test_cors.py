"""CORS (``[server] cors_allow_origins``, gateway/api/cors.py): what a browser's fetch sees.

Real kvgate on loopback, both doors; the browser's side of the protocol is played with httpx
(the preflight and the Origin header are what the Fetch standard has a browser send).
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from gateway.config import ConfigError, build_settings
from tests.support.browser import need_chromium, start_chromium
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway, chat_body

PAGE = "https://app.example.com"
OTHER = "https://evil.example.net"
KEY = "sk-cors-test"


def _config(fake: FakeUpstream, origins: list[str]) -> dict[str, object]:
    return {
        "server": {"cors_allow_origins": origins},
        "auth": {"api_keys": [KEY]},
        "clusters": {"fast": {"endpoints": [{"name": "fast-a", "url": fake.base_url, "model": "qwen-served"}]}},
        "models": {"qwen-fast": {"cluster": "fast"}},
    }


@pytest.fixture(scope="module", params=["raw", "asgi"])
def cors_gateway(request: pytest.FixtureRequest, fake_a: FakeUpstream) -> Iterator[RunningGateway]:
    gateway = RunningGateway(_config(fake_a, [PAGE]), door=request.param).start()
    yield gateway
    gateway.stop()


def preflight(gateway: RunningGateway, origin: str, path: str = "/v1/chat/completions") -> httpx.Response:
    return httpx.options(gateway.url + path, headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, x-stainless-lang",
    }, timeout=10)


def test_preflight_for_an_allowed_origin_is_answered_before_auth(cors_gateway: RunningGateway) -> None:
    response = preflight(cors_gateway, PAGE)
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == PAGE
    assert "POST" in response.headers["access-control-allow-methods"]
    allowed = response.headers["access-control-allow-headers"].lower()
    assert "authorization" in allowed and "x-stainless-lang" in allowed
    assert int(response.headers["access-control-max-age"]) > 0


def test_preflight_for_another_origin_is_refused(cors_gateway: RunningGateway) -> None:
    response = preflight(cors_gateway, OTHER)
    assert response.status_code == 400
    assert "access-control-allow-origin" not in response.headers


@pytest.mark.parametrize("stream", [False, True])
def test_answers_to_an_allowed_origin_carry_cors_headers(cors_gateway: RunningGateway, stream: bool) -> None:
    response = httpx.post(cors_gateway.base_url + "/chat/completions", json=chat_body(stream=stream),
                          headers={"Origin": PAGE, "Authorization": f"Bearer {KEY}"}, timeout=10)
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] == PAGE
    exposed = response.headers["access-control-expose-headers"].lower()
    assert "x-request-id" in exposed and "x-kvgate-endpoint" in exposed
    if stream:
        assert response.text.rstrip().endswith("data: [DONE]")
    else:
        assert response.json()["choices"]


def test_errors_carry_cors_headers_so_a_page_can_read_them(cors_gateway: RunningGateway) -> None:
    response = httpx.post(cors_gateway.base_url + "/chat/completions", json=chat_body(),
                          headers={"Origin": PAGE, "Authorization": "Bearer wrong"}, timeout=10)
    assert response.status_code == 401
    assert response.headers["access-control-allow-origin"] == PAGE
    assert response.json()["error"]["code"]


def test_other_origins_and_the_admin_api_get_no_cors_headers(cors_gateway: RunningGateway) -> None:
    other = httpx.post(cors_gateway.base_url + "/chat/completions", json=chat_body(),
                       headers={"Origin": OTHER, "Authorization": f"Bearer {KEY}"}, timeout=10)
    assert other.status_code == 200 and "access-control-allow-origin" not in other.headers
    metrics = httpx.get(cors_gateway.url + "/metrics", headers={"Origin": PAGE}, timeout=10)
    assert "access-control-allow-origin" not in metrics.headers
    assert preflight(cors_gateway, PAGE, "/admin/keys").headers.get("access-control-allow-origin") is None


def test_off_by_default(gateway: RunningGateway) -> None:
    response = httpx.post(gateway.base_url + "/chat/completions", json=chat_body(), headers={"Origin": PAGE}, timeout=10)
    assert response.status_code == 200
    assert "access-control-allow-origin" not in response.headers


def test_any_origin(fake_a: FakeUpstream) -> None:
    gateway = RunningGateway(_config(fake_a, ["*"])).start()
    try:
        response = preflight(gateway, OTHER)
        assert response.status_code == 200 and response.headers["access-control-allow-origin"] == "*"
    finally:
        gateway.stop()


@pytest.mark.parametrize("origins", [["https://app.example.com/"], ["app.example.com"], ["*", PAGE]])
def test_bad_origins_are_a_config_error(origins: list[str]) -> None:
    with pytest.raises(ConfigError, match="cors_allow_origins"):
        build_settings({"server": {"cors_allow_origins": origins}})


# --- a real browser (Debian's chromium): a page on one origin calls kvgate on another ----------------

FETCH = """
const [url, key, done] = [arguments[0], arguments[1], arguments[arguments.length - 1]];
fetch(url + "/v1/chat/completions", {method: "POST",
  headers: {"Authorization": "Bearer " + key, "Content-Type": "application/json", "X-Stainless-Lang": "js"},
  body: JSON.stringify({model: "qwen-fast", stream: true, messages: [{role: "user", content: "hi"}]})})
  .then(async r => done({status: r.status, id: r.headers.get("x-request-id"), text: await r.text()}))
  .catch(e => done({error: String(e)}));
"""


@pytest.fixture(scope="module")
def page_origin() -> Iterator[str]:
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802  # http.server's name
            body = b"<!doctype html><title>app</title><p>app</p>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_browser_page_streams_from_kvgate_only_from_an_allowed_origin(fake_a: FakeUpstream, page_origin: str) -> None:
    need_chromium()
    allowed = RunningGateway(_config(fake_a, [page_origin])).start()
    refused = RunningGateway(_config(fake_a, [PAGE])).start()
    driver = start_chromium()
    try:
        driver.set_script_timeout(30)
        driver.get(page_origin + "/")
        ok = driver.execute_async_script(FETCH, allowed.url, KEY)
        assert ok.get("status") == 200, ok
        assert ok["id"], ok  # an exposed header the page can read
        assert ok["text"].rstrip().endswith("data: [DONE]"), ok
        blocked = driver.execute_async_script(FETCH, refused.url, KEY)
        assert "error" in blocked and "status" not in blocked, blocked  # the browser refused to hand it over
    finally:
        driver.quit()
        allowed.stop()
        refused.stop()
