"""The table of APIs: matching paths, the rows' flags, parse through the table."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import InvalidRequestError
from gateway.protocol import apis
from gateway.protocol.openai import InferenceRequest


@pytest.mark.parametrize("method, path, name, ident", [
    ("POST", "/v1/chat/completions", "chat", None),
    ("POST", "/v1/completions", "completions", None),
    ("POST", "/v1/responses", "responses", None),
    ("GET", "/v1/responses/resp_1", "responses.retrieve", "resp_1"),
    ("POST", "/v1/responses/resp_1/cancel", "responses.cancel", "resp_1"),
    ("DELETE", "/v1/responses/resp_1", "responses.delete", "resp_1"),
    ("POST", "/v1/messages", "messages", None),
    ("POST", "/v1/messages/count_tokens", "messages.count_tokens", None),
    ("POST", "/v1/embeddings", "embeddings", None),
    ("POST", "/v1/rerank", "rerank", None),
    ("POST", "/v1/score", "score", None),
])
def test_match(method: str, path: str, name: str, ident: str | None) -> None:
    found = apis.match(method, path)
    assert found is not None and (found[0].name, found[1]) == (name, ident)


@pytest.mark.parametrize("method, path", [
    ("GET", "/v1/responses"), ("GET", "/v1/responses/"), ("GET", "/v1/responses/a/b"),
    ("POST", "/v1/nope"), ("GET", "/v1/messages"), ("POST", "/v1/responses/x/cancel/more"),
])
def test_no_match(method: str, path: str) -> None:
    assert apis.match(method, path) is None


def test_methods_at_for_a_405() -> None:
    assert apis.methods_at("/v1/responses/resp_1") == ["DELETE", "GET"]
    assert apis.methods_at("/v1/messages") == ["POST"]
    assert apis.methods_at("/v1/nope") == []


def test_rows() -> None:
    rows = apis.BY_NAME
    assert [name for name, api in rows.items() if api.continuable] == ["chat"]
    assert {name for name, api in rows.items() if api.serves == "pooling"} == {"embeddings", "rerank", "score"}
    assert {name for name, api in rows.items() if api.state == "reads"} == {
        "responses.retrieve", "responses.cancel", "responses.delete"}
    assert rows["responses"].state == "creates" and rows["messages"].client_headers
    assert {name for name, api in rows.items() if api.hashed} == {"chat", "completions", "responses", "messages"}
    assert all(api.observer is None for api in rows.values() if api.serves == "pooling")
    error = InvalidRequestError("bad", param="model")
    assert orjson.loads(rows["messages"].error_body(error))["type"] == "error"
    assert orjson.loads(rows["responses"].error_body(error))["error"]["param"] == "model"
    assert "POST /v1/responses" in apis.supported_paths()


def test_parse_through_the_table() -> None:
    chat, _ = apis.match("POST", "/v1/chat/completions")  # type: ignore[misc]
    parsed = chat.parse(orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}]}), None)
    assert isinstance(parsed, InferenceRequest)
    retrieve, ident = apis.match("GET", "/v1/responses/resp_9")  # type: ignore[misc]
    assert retrieve.parse(b"", ident).state_id == "resp_9"
    assert retrieve.usage({"id": "resp_9"}) is None


def test_unknown_path_is_a_404_naming_the_routes_or_a_405() -> None:
    missing = apis.unknown_path("POST", "/v1/nope")
    assert missing.status == 404 and missing.message.startswith("Unknown path: POST /v1/nope.")
    assert "POST /v1/responses" in missing.message
    wrong = apis.unknown_path("PUT", "/v1/responses/resp_1")
    assert wrong.status == 405 and wrong.headers == {"Allow": "DELETE, GET"}


def test_upstream_path_is_below_the_v1_base() -> None:
    assert apis.upstream_path("/v1/responses/resp_1/cancel") == "/responses/resp_1/cancel"
    assert apis.upstream_path("/v1/messages") == "/messages"


def test_call_for_keeps_the_id_and_the_query_for_the_endpoint() -> None:
    call = apis.call_for("GET", "/v1/responses/resp_1", b"stream=true&starting_after=3")
    assert call is not None and call.api.name == "responses.retrieve" and call.ident == "resp_1"
    assert call.upstream_path == "/responses/resp_1?stream=true&starting_after=3"
    assert apis.call_for("POST", "/v1/messages").upstream_path == "/messages"  # type: ignore[union-attr]
    assert apis.call_for("GET", "/v1/messages") is None


_USER = [{"role": "user", "content": "x"}]
_COUNT_BODIES = {
    "messages": ("max_tokens", {"model": "m", "messages": _USER}),
    "responses": ("max_output_tokens", {"model": "m", "input": "x"}),
    "embeddings": ("dimensions", {"model": "m", "input": "x"}),
}


@pytest.mark.parametrize("api", sorted(_COUNT_BODIES))
@pytest.mark.parametrize(
    ("value", "code", "words"),
    [
        (10**30, "integer_above_max_value", "Expected a value <= 2147483647"),
        (2**31, "integer_above_max_value", "Expected a value <= 2147483647"),
        (0, "integer_below_min_value", "Expected a value >= 1"),
        (-5, "integer_below_min_value", "Expected a value >= 1"),
        (5.5, None, "expected an integer"),
        (True, None, "expected an integer"),
        ("5", None, "expected an integer"),
    ],
)
def test_the_other_apis_count_fields_are_integers_in_range(api: str, value: object, code: str | None, words: str) -> None:
    field, body = _COUNT_BODIES[api]
    call, _ = apis.match("POST", f"/v1/{api}")  # type: ignore[misc]
    with pytest.raises(InvalidRequestError) as refused:
        call.parse(orjson.dumps({**body, field: value}) if value != 10**30 else
                   orjson.dumps(body)[:-1] + b',"%s":%d}' % (field.encode(), value), None)
    assert refused.value.param == field and refused.value.code == code
    assert words in refused.value.message


@pytest.mark.parametrize("api", sorted(_COUNT_BODIES))
def test_the_other_apis_count_fields_accept_an_integral_number(api: str) -> None:
    field, body = _COUNT_BODIES[api]
    call, _ = apis.match("POST", f"/v1/{api}")  # type: ignore[misc]
    assert call.parse(orjson.dumps({**body, field: 64}), None).body[field] == 64
    assert call.parse(orjson.dumps({**body, field: 64.0}), None).body[field] == 64.0  # the body stays as sent
