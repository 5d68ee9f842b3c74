import orjson
import pytest

from gateway.errors import ModelNotFoundError, UpstreamClientError, UpstreamError, error_message_of
from gateway.selection.catalog import ModelCatalog
from gateway.config import build_settings


def test_error_body_shape() -> None:
    body = orjson.loads(UpstreamError("boom").body())
    assert body == {"error": {"message": "boom", "type": "server_error", "param": None, "code": "upstream_error"}}


@pytest.mark.parametrize(
    ("status", "raw", "expected"),
    [
        # vLLM's shape: its exception's class as the type, the status as an integer code
        (400, b'{"error": {"message": "max_tokens too large", "type": "BadRequestError", "param": null, "code": 400}}',
         {"message": "max_tokens too large", "type": "invalid_request_error", "param": None, "code": None}),
        # OpenAI's own shape (a managed endpoint) keeps its fields
        (400, b'{"error": {"message": "bad", "type": "invalid_request_error", "param": "tools", "code": "invalid_value"}}',
         {"message": "bad", "type": "invalid_request_error", "param": "tools", "code": "invalid_value"}),
        (429, b'{"error": {"message": "slow down", "type": "TooManyRequests", "code": 429}}',
         {"message": "slow down", "type": "rate_limit_error", "param": None, "code": None}),
        # older vLLM: flat, no error object; extra fields are not relayed
        (400, b'{"object": "error", "message": "flat", "type": "BadRequestError", "param": "n", "code": 400, "x": 1}',
         {"message": "flat", "type": "invalid_request_error", "param": "n", "code": None}),
        (400, b'{"error": {"message": "This model\'s maximum context length is 2048 tokens. However, you requested 3000",'
              b' "type": "BadRequestError", "param": null, "code": 400}}',
         {"message": "This model's maximum context length is 2048 tokens. However, you requested 3000",
          "type": "invalid_request_error", "param": None, "code": "context_length_exceeded"}),
        (400, b'{"error": {"message": "The decoder prompt (length 5000) is longer than the maximum model length of 2048."}}',
         {"message": "The decoder prompt (length 5000) is longer than the maximum model length of 2048.",
          "type": "invalid_request_error", "param": None, "code": "context_length_exceeded"}),
        (400, b'{"error": {"message": "m", "type": ["x"], "param": 3, "code": "%s"}}' % (b"c" * 65),
         {"message": "m", "type": "invalid_request_error", "param": None, "code": None}),
        (404, b"Not Found", {"message": "Not Found", "type": "invalid_request_error", "param": None, "code": None}),
        (422, b"", {"message": "upstream returned HTTP 422", "type": "invalid_request_error", "param": None, "code": None}),
    ],
)
def test_upstream_client_error_answers_in_openai_shape(status: int, raw: bytes, expected: dict) -> None:
    error = UpstreamClientError(status, raw)
    assert error.status == status
    assert orjson.loads(error.body()) == {"error": expected}
    assert (error.raw is not None) == raw.startswith(b'{"error"')  # another API's door reads the body as it came


@pytest.mark.parametrize(
    ("raw", "status", "relay_text", "expected"),
    [
        (b'{"error": {"message": "boom"}}', 500, False, "boom"),
        (b'{"object": "error", "message": "flat"}', 400, True, "flat"),
        (b"<html><pre>Traceback (most recent call last):</pre></html>", 502, False,
         "Bad Gateway (a non-JSON body of 58 bytes, not relayed)"),
        (b"<html>nope</html>", 404, True, "Not Found (a non-JSON body of 17 bytes, not relayed)"),
        (b"one short line", 500, False, "Internal Server Error (a non-JSON body of 14 bytes, not relayed)"),
        (b"one short line", 400, True, "one short line"),
        (b"Traceback (most recent call last): x", 400, True, "Bad Request (a non-JSON body of 36 bytes, not relayed)"),
        (b"a\nb", 400, True, "Bad Request (a non-JSON body of 3 bytes, not relayed)"),
        (b"[1, 2]", 599, False, "Error (a JSON body with no message of 6 bytes, not relayed)"),
        # other servers' JSON shapes: TGI / SGLang's string error, FastAPI's detail (a string or pydantic's list)
        (b'{"error": "Input validation error: bad", "error_type": "validation"}', 422, True, "Input validation error: bad"),
        (b'{"detail": "Not Found"}', 404, True, "Not Found"),
        (b'{"detail": [{"loc": ["body", "temperature"], "msg": "bad"}, {"loc": ["query", "x"], "msg": "worse"}]}', 422,
         True, "temperature: bad; query.x: worse"),
        (b'{"detail": [{"msg": "no place"}]}', 422, True, "no place"),
        (b'{"detail": [1, {"loc": "body"}]}', 422, True, "Unprocessable Entity (a JSON body with no message of 32 bytes, not relayed)"),
    ],
)
def test_error_message_of_never_relays_a_page(raw: bytes, status: int, relay_text: bool, expected: str) -> None:
    assert error_message_of(raw, status, relay_text=relay_text) == expected


def test_catalog_names_aliases_and_clusters() -> None:
    settings = build_settings(
        {
            "clusters": {"reasoning": {}, "fast": {}},
            "models": {"r1": {"cluster": "reasoning", "aliases": ["deep"]}, "qwen": {"cluster": "fast"}},
        }
    )
    catalog = ModelCatalog.from_settings(settings)
    assert [entry.id for entry in catalog.entries()] == ["r1", "deep", "qwen", "reasoning", "fast"]
    assert catalog.resolve("deep").cluster == "reasoning"
    assert catalog.resolve("fast").cluster == "fast"
    with pytest.raises(ModelNotFoundError) as caught:
        catalog.resolve("gpt-9")
    assert caught.value.status == 404 and caught.value.code == "model_not_found"


def test_a_route_timeouts_table_overrides_only_the_fields_it_sets() -> None:
    settings = build_settings({
        "upstream": {"timeouts": {"total_s": 1.5, "connect_s": 2.0}},
        "clusters": {"c": {"endpoints": [{"url": "http://127.0.0.1:9/v1", "model": "m"}]}},
        "routes": {"r-part": {"clusters": ["c"], "timeouts": {"idle_s": 100.0}}, "r-none": {"clusters": ["c"]}},
        "models": {"m-part": {"route": "r-part"}, "m-none": {"route": "r-none"}},
    })
    catalog = ModelCatalog.from_settings(settings)
    part = catalog.resolve("m-part").route.timeouts
    assert (part.idle_s, part.total_s, part.connect_s, part.first_byte_s) == (100.0, 1.5, 2.0, 300.0)
    assert catalog.resolve("m-none").route.timeouts == settings.upstream.timeouts
