"""Assertions of the Responses / Messages / embeddings contract (simulator vs recorded vLLM)."""

from __future__ import annotations

from gateway.keys.pricing import TokenUsage
from gateway.protocol import messages, responses
from tests.contract.vllm_apis import typed_events
from tests.contract.vllm_surface import Recorded, shape

SAME_SHAPE = ("resp_create", "st_create", "st_get", "st_turn2", "msg_create", "msg_count", "embeddings_generate_model")
STREAMS = ("resp_stream", "msg_stream")
ERRORS = ("resp_prev_missing", "st_cancel", "msg_err")
POOL_SAME_SHAPE = ("pool_models", "pool_emb_str", "pool_emb_list", "pool_emb_b64", "pool_score", "pool_rerank",
                   "pool_chat")
POOL_ERRORS = ("pool_emb_dims", "pool_emb_nomodel")


def same_shape(real: Recorded, sim: Recorded) -> None:
    assert shape(sim.json()) == shape(real.json())


def typed_stream_shapes(recorded: Recorded) -> list[object]:
    """(event name, data shape) of each event, runs of identical ones collapsed."""
    shapes: list[object] = []
    for name, data in typed_events(recorded):
        current = (name, shape({k: v for k, v in data.items() if k != "sequence_number"}))
        if not shapes or shapes[-1] != current:
            shapes.append(current)
    return shapes


def same_typed_stream(real: Recorded, sim: Recorded) -> None:
    assert sim.content_type == "text/event-stream; charset=utf-8"
    assert typed_stream_shapes(sim) == typed_stream_shapes(real)
    numbers = [data.get("sequence_number") for _, data in typed_events(sim)]
    real_numbers = [data.get("sequence_number") for _, data in typed_events(real)]
    if real_numbers[0] is not None:  # Responses: 0, 1, 2, ... as vLLM numbers them
        assert numbers == list(range(len(numbers))) and real_numbers == list(range(len(real_numbers)))
    assert "[DONE]" not in sim.text and "[DONE]" not in real.text


def same_api_error(real: Recorded, sim: Recorded) -> None:
    real_body, sim_body = real.json(), sim.json()
    assert shape(sim_body) == shape(real_body)
    real_error, sim_error = real_body["error"], sim_body["error"]
    assert sim_error["type"] == real_error["type"]
    if "code" in real_error:
        assert (sim_error["code"], sim_error["param"]) == (real_error["code"], real_error["param"])
    if "resp_nope" in real_error["message"] or "synchronous" in real_error["message"]:
        assert sim_error["message"] == real_error["message"]


def usage_behaviour(side: dict[str, Recorded]) -> None:
    """kvgate's usage readers find the counts; a second turn carries the first one's tokens."""
    first, second = responses.usage_of(side["st_create"].json()), responses.usage_of(side["st_turn2"].json())
    assert isinstance(first, TokenUsage) and isinstance(second, TokenUsage)
    assert second.input > first.input + first.output - 1
    assert side["st_turn2"].json()["previous_response_id"] == side["st_create"].json()["id"]
    assert side["st_get"].json() == side["st_create"].json()
    created = messages.usage_of(side["msg_create"].json())
    assert created is not None and created.input > 0 and created.output > 0
    assert side["msg_count"].json()["input_tokens"] == side["msg_count"].json()["context_management"][
        "original_input_tokens"]


def pooled_vectors(side: dict[str, Recorded], dim: int) -> None:
    """Unit vectors of ``dim`` floats, one per input, in order; usage as kvgate reads it (input only)."""
    import base64
    import math

    from gateway.protocol import embeddings

    for name, count in (("pool_emb_str", 1), ("pool_emb_list", 2)):
        body = side[name].json()
        vectors = [item["embedding"] for item in body["data"]]
        assert [item["index"] for item in body["data"]] == list(range(count))
        assert all(len(v) == dim and math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-3) for v in vectors)
        tokens = embeddings.usage_of(body)
        assert tokens is not None and tokens.input > 0 and tokens.output == 0
    assert len(base64.b64decode(side["pool_emb_b64"].json()["data"][0]["embedding"])) == 4 * dim
    assert side["pool_emb_list"].json()["usage"]["prompt_tokens"] > side["pool_emb_str"].json()["usage"]["prompt_tokens"]
    rerank = side["pool_rerank"].json()
    scores = [r["relevance_score"] for r in rerank["results"]]
    assert scores == sorted(scores, reverse=True) and sorted(r["index"] for r in rerank["results"]) == [0, 1]
    for name in ("pool_score", "pool_rerank"):
        tokens = embeddings.usage_of(side[name].json())
        assert tokens is not None and tokens.input > 0
