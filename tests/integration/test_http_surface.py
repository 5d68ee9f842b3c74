"""Corners of the HTTP surface an outside trial found (real SDKs over loopback, a simulated worker):
``GET /v1/models/{model}``; a 405's ``Allow`` naming every method at the path; an admin path
unknown; a compressed request body (415, RFC 7694); Anthropic's ``request-id`` header; an
endpoint's FastAPI-shaped 4xx relayed with its message.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator

import anthropic
import httpx
import openai
import orjson
import pytest

from tests.integration.conftest import NEVER_EJECT
from tests.integration.test_apis import Sim
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway, error_shape_ok

KEY, LIMITED = "sk-surface-key", "sk-surface-limited"
ADMIN = "sk-surface-admin"
MODEL = "smollm2"


@pytest.fixture(scope="module")
def gateway(sim: Sim) -> Iterator[RunningGateway]:
    running = RunningGateway({
        "auth": {"api_keys": [KEY], "keys": [{"name": "limited", "key": LIMITED, "models": ["other"]}]},
        "admin": {"api_key": ADMIN},
        **NEVER_EJECT,
        "clusters": {"gen": {"endpoints": [{"name": "gen-a", "url": sim.url, "model": MODEL}]},
                     "spare": {"endpoints": [{"name": "spare-a", "url": sim.url, "model": MODEL}]}},
        "models": {MODEL: {"cluster": "gen", "aliases": ["smol"]}, "other": {"cluster": "spare"}},
    }, health_checks=False).start()
    yield running
    running.stop()


def test_a_model_is_retrieved_by_name_or_alias_and_an_unknown_one_is_404(gateway: RunningGateway) -> None:
    with openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0) as client:
        model = client.models.retrieve(MODEL)
        assert model.id == MODEL and model.object == "model" and model.owned_by == "kvgate"
        assert client.models.retrieve("smol").id == "smol"
        listed = {m.id for m in client.models.list()}
        assert {MODEL, "smol"} <= listed
        with pytest.raises(openai.NotFoundError) as missing:
            client.models.retrieve("no-such-model")
    assert missing.value.code == "model_not_found" and missing.value.body["param"] == "model"
    with openai.OpenAI(base_url=gateway.base_url, api_key=LIMITED, max_retries=0) as limited:
        assert limited.models.retrieve("other").id == "other"
        with pytest.raises(openai.NotFoundError):  # exists, but not for this key: unknown to it
            limited.models.retrieve(MODEL)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=gateway.base_url, api_key="sk-wrong", max_retries=0).models.retrieve(MODEL)


@pytest.mark.parametrize(("method", "path", "served"), [
    ("PUT", "/admin/endpoints", {"GET", "POST"}),
    ("POST", "/admin/endpoints/gen-a", {"GET", "PATCH", "DELETE"}),
])
def test_a_405_allows_every_method_served_at_the_path(gateway: RunningGateway, method: str, path: str, served: set[str]) -> None:
    response = httpx.request(method, gateway.url + path, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
    assert response.status_code == 405 and error_shape_ok(response.json())
    allowed = {m.strip() for m in response.headers["allow"].split(",")}
    assert served <= allowed and method not in allowed
    assert all(m in response.json()["error"]["message"] for m in served)


def test_an_unknown_admin_path_is_a_404_about_the_admin_api(gateway: RunningGateway) -> None:
    response = httpx.get(gateway.url + "/admin/nope", headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10)
    assert response.status_code == 404 and error_shape_ok(response.json())
    message = response.json()["error"]["message"]
    assert "Unknown admin path" in message and "/v1/chat/completions" not in message


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
@pytest.mark.parametrize("encoding", ["gzip", "br", "identity, gzip"])
def test_a_compressed_request_body_is_415_naming_the_encoding(gateway: RunningGateway, path: str, encoding: str) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"model": MODEL, "input": "hi"}
    raw = orjson.dumps(body)
    content = gzip.compress(raw) if encoding.endswith("gzip") else raw  # "br" declared, sent plain: refused too
    response = httpx.post(gateway.url + path, content=content, timeout=10, headers={
        "Authorization": f"Bearer {KEY}", "Content-Type": "application/json", "Content-Encoding": encoding})
    assert response.status_code == 415 and error_shape_ok(response.json())
    assert response.json()["error"]["param"] == "Content-Encoding" and response.headers["accept-encoding"] == "identity"
    plain = httpx.post(gateway.url + path, content=raw, timeout=30, headers={
        "Authorization": f"Bearer {KEY}", "Content-Type": "application/json", "Content-Encoding": "identity"})
    assert plain.status_code == 200


def test_anthropic_answers_carry_request_id_for_its_sdk(gateway: RunningGateway) -> None:
    with anthropic.Anthropic(base_url=gateway.url, api_key=KEY, max_retries=0, timeout=30) as client:
        message = client.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}])
        assert message._request_id
        with pytest.raises(anthropic.NotFoundError) as missing:
            client.messages.create(model="no-such-model", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert missing.value.request_id and missing.value.response.headers["x-request-id"] == missing.value.request_id
    chat = httpx.post(gateway.url + "/v1/chat/completions", timeout=30, headers={"Authorization": f"Bearer {KEY}"},
                      json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    assert "request-id" not in chat.headers and chat.headers["x-request-id"]  # OpenAI's doors keep their own


def test_an_endpoints_fastapi_shaped_4xx_reaches_the_sdk_with_its_message(fake_a: FakeUpstream) -> None:
    running = RunningGateway({"clusters": {"f": {"endpoints": [{"name": "f-a", "url": fake_a.base_url, "model": "m"}]}},
                              "models": {"m": {"cluster": "f"}}, **NEVER_EJECT}, health_checks=False).start()
    try:
        with openai.OpenAI(base_url=running.base_url, api_key="unused", max_retries=0) as client:
            with pytest.raises(openai.UnprocessableEntityError) as refused:
                client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}],
                                               extra_body={"fake": "status:422:fastapi"})
    finally:
        running.stop()
    assert refused.value.body["message"] == "temperature: Input should be less than or equal to 2"
