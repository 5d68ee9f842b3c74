"""The pooling APIs (embeddings, rerank, score): parse and usage."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import InvalidRequestError
from gateway.keys.pricing import TokenUsage
from gateway.protocol import embeddings


@pytest.mark.parametrize("value", ["hi", ["a", "b"], [1, 2, 3], [[1, 2], [3]]])
def test_embeddings_inputs_accepted(value: object) -> None:
    request = embeddings.parse_embeddings(orjson.dumps({"model": "e", "input": value}))
    assert (request.api, request.model, request.stream, request.prompt) == ("embeddings", "e", False, None)


@pytest.mark.parametrize("body, param", [
    ({"model": "e"}, "input"),
    ({"model": "e", "input": ""}, "input"),
    ({"model": "e", "input": []}, "input"),
    ({"model": "e", "input": [1, "a"]}, "input"),
    ({"model": "e", "input": [[]]}, "input"),
    ({"model": "e", "input": "x", "dimensions": "3"}, "dimensions"),
    ({"input": "x"}, "model"),
])
def test_embeddings_errors_name_the_field(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        embeddings.parse_embeddings(orjson.dumps(body))
    assert caught.value.param == param


def test_rerank_and_score() -> None:
    assert embeddings.parse_rerank(orjson.dumps({"model": "r", "query": "q", "documents": ["a"]})).api == "rerank"
    with pytest.raises(InvalidRequestError) as caught:
        embeddings.parse_rerank(orjson.dumps({"model": "r", "query": "q"}))
    assert caught.value.param == "documents"
    assert embeddings.parse_score(orjson.dumps({"model": "s", "text_1": "a", "text_2": "b"})).model == "s"


def test_usage_is_input_only() -> None:
    body = {"usage": {"prompt_tokens": 7, "total_tokens": 7, "completion_tokens": 0, "prompt_tokens_details": None}}
    assert embeddings.usage_of(body) == TokenUsage(7, 0, 0)
    assert embeddings.usage_of({"usage": {"total_tokens": 9}}) == TokenUsage(9, 0, 0)
    assert embeddings.usage_of({"data": []}) is None
