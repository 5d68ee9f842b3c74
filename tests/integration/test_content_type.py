"""Content-Type on the inference routes: anything but ``application/json`` is a 415 (issue 16, item 6).

Both doors are covered: the raw protocol's fast path (``gateway``, the shared fixture) and the
ASGI path (``asgi_gateway``: inference by the ASGI door, with the access log on). A refused body
never reaches the endpoint.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import orjson
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway, chat_body, error_shape_ok

PATHS = ["/v1/chat/completions", "/v1/completions"]
REFUSED = ["text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
           "application/jsonx", "", "application/xml"]
ACCEPTED = ["application/json", "application/json; charset=utf-8", "Application/JSON", "application/json;charset=UTF-8"]


@pytest.fixture(scope="module")
def asgi_gateway(fake_a: FakeUpstream) -> Iterator[RunningGateway]:
    running = RunningGateway(
        {
            "server": {"access_log": True},
            "clusters": {"fast": {"endpoints": [{"name": "ct-a", "url": fake_a.base_url, "model": "qwen-served"}]}},
            "models": {"qwen-fast": {"cluster": "fast"}},
        },
        door="asgi",
    ).start()
    assert running.door == "asgi"
    yield running
    running.stop()


def _body(path: str) -> bytes:
    if path.endswith("/chat/completions"):
        return orjson.dumps(chat_body())
    return orjson.dumps({"model": "qwen-fast", "prompt": "hi"})


@pytest.mark.parametrize("door", ["gateway", "asgi_gateway"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("content_type", REFUSED)
def test_non_json_content_type_is_415_and_never_forwarded(
    request: pytest.FixtureRequest, fake_a: FakeUpstream, http: httpx.Client, door: str, path: str, content_type: str
) -> None:
    gateway: RunningGateway = request.getfixturevalue(door)
    seen = len(fake_a.requests)
    response = http.post(gateway.url + path, content=_body(path), headers={"Content-Type": content_type})
    assert response.status_code == 415, response.text
    payload = response.json()
    assert error_shape_ok(payload)
    assert payload["error"]["type"] == "invalid_request_error"
    assert payload["error"]["code"] == "unsupported_media_type"
    assert payload["error"]["param"] == "Content-Type"
    assert response.headers.get("x-request-id")
    assert len(fake_a.requests) == seen


@pytest.mark.parametrize("door", ["gateway", "asgi_gateway"])
@pytest.mark.parametrize("content_type", ACCEPTED)
def test_json_content_type_with_or_without_parameters_is_served(
    request: pytest.FixtureRequest, http: httpx.Client, door: str, content_type: str
) -> None:
    gateway: RunningGateway = request.getfixturevalue(door)
    response = http.post(gateway.url + PATHS[0], content=_body(PATHS[0]), headers={"Content-Type": content_type})
    assert response.status_code == 200, response.text


def test_official_sdk_is_served(gateway: RunningGateway) -> None:
    with openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0) as client:
        completion = client.chat.completions.create(model="qwen-fast", messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content


def test_form_encoded_body_via_the_sdk_transport_is_415(gateway: RunningGateway) -> None:
    """What ``curl -d '{...}'`` sends: a JSON text labelled form-encoded."""
    with openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0) as client:
        with pytest.raises(openai.APIStatusError) as caught:
            client.post("/chat/completions", body=chat_body(), cast_to=httpx.Response,
                        options={"headers": {"Content-Type": "application/x-www-form-urlencoded"}})
    assert caught.value.status_code == 415
    assert caught.value.code == "unsupported_media_type"
