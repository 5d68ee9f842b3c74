"""Assertions shared by the recorded and the live contract tests (simulator vs vLLM)."""

from __future__ import annotations

from collections.abc import Mapping

from tests.contract.vllm_surface import Recorded, metric_labels, shape, stream_shapes

SAME_SHAPE = ("models", "version", "load", "detok", "chat", "chat_again", "cmpl",
              "tokenize_0", "tokenize_chat_0")
STREAMS = ("chat_stream", "chat_stream_nousage", "cmpl_stream")
ERRORS = ("err_model", "err_max", "err_long", "err_json")
TOKENIZE = ("tokenize_0", "tokenize_1", "tokenize_2", "tokenize_chat_0", "tokenize_chat_1",
            "tokenize_chat_2")

REQUIRED_METRICS = (
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
    "vllm:prompt_tokens_cached_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
    "vllm:request_success_total", "vllm:num_preemptions_total", "vllm:cache_config_info",
    "vllm:time_to_first_token_seconds_count", "vllm:time_to_first_token_seconds_sum",
    "vllm:inter_token_latency_seconds_count", "vllm:e2e_request_latency_seconds_count",
    "vllm:request_queue_time_seconds_count", "vllm:request_prompt_tokens_count",
    "vllm:request_generation_tokens_count", "vllm:iteration_tokens_total_count",
)
CACHE_INFO_LABELS = ("block_size", "num_gpu_blocks", "enable_prefix_caching", "cache_dtype",
                     "kv_cache_size_tokens", "engine")


def same_status_and_shape(real: Recorded, sim: Recorded) -> None:
    assert (sim.status, sim.content_type) == (real.status, real.content_type)
    assert shape(sim.json()) == shape(real.json())


def same_stream(real: Recorded, sim: Recorded) -> None:
    assert (sim.status, sim.content_type) == (real.status, real.content_type)
    assert stream_shapes(sim) == stream_shapes(real)


def same_error(real: Recorded, sim: Recorded) -> None:
    assert (sim.status, sim.content_type) == (real.status, real.content_type)
    real_error, sim_error = real.json()["error"], sim.json()["error"]
    assert shape(sim_error) == shape(real_error)
    assert sim_error["type"] == real_error["type"] and sim_error["code"] == real_error["code"]
    if real_error["param"] in ("model", "max_tokens", "input_tokens"):
        assert sim_error["param"] == real_error["param"]


def similar_count(real: Recorded, sim: Recorded) -> None:
    """The simulator's tokenizer stays within 10% (+3 tokens) of SmolLM2's."""
    real_count, sim_count = real.json()["count"], sim.json()["count"]
    assert abs(sim_count - real_count) <= 0.1 * real_count + 3, (sim_count, real_count)


def _usage(recorded: Recorded) -> Mapping[str, object]:
    if recorded.text.startswith("data: "):
        return next(e["usage"] for e in recorded.events() if isinstance(e, dict) and e.get("usage"))
    return recorded.json()["usage"]


def cached_tokens_behaviour(side: Mapping[str, Recorded], block_size: int) -> None:
    """First sight of a prompt: 0 cached; a repeat: every whole block but the last token's."""
    first, again = _usage(side["chat"]), _usage(side["chat_again"])
    prompt = int(first["prompt_tokens"])
    whole = (prompt - 1) // block_size * block_size
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    assert first["prompt_tokens_details"]["created_cache_tokens"] == prompt // block_size * block_size
    assert again["prompt_tokens_details"]["cached_tokens"] == whole
    assert again["prompt_tokens_details"]["created_cache_tokens"] == 0
    assert _usage(side["chat_stream"])["prompt_tokens_details"]["cached_tokens"] == whole
    # a text completion of the same text has a different (template-free) prefix: cold ...
    assert _usage(side["cmpl"])["prompt_tokens_details"]["cached_tokens"] == 0
    # ... and warm the second time
    stream = _usage(side["cmpl_stream"])
    assert stream["prompt_tokens_details"]["cached_tokens"] == (
        (int(stream["prompt_tokens"]) - 1) // block_size * block_size)


def same_metrics(real_text: str, sim_text: str) -> None:
    real, sim = metric_labels(real_text), metric_labels(sim_text)
    for name in REQUIRED_METRICS:
        assert name in real, f"{name} missing from the recording"
        assert name in sim, f"{name} missing from the simulator"
        if name != "vllm:cache_config_info":
            assert sim[name] == real[name], name
    for label in CACHE_INFO_LABELS:
        assert label in real["vllm:cache_config_info"] and label in sim["vllm:cache_config_info"]
    assert 'block_size="128"' in sim_text and 'num_gpu_blocks="728"' in sim_text
