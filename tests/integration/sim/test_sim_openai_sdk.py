"""The simulator through the official openai SDK over loopback: shapes, usage, cached tokens."""

from __future__ import annotations

import openai
import pytest
from sim_support import MODEL, RunningSim, instant_config

from backends.sim.output import OutputLength, OutputPolicy

SYSTEM = " ".join(f"Rule {i}: answer briefly and cite the source document." for i in range(40))


def _messages(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]


async def test_chat_cached_tokens_grow_on_a_shared_prefix(sim: RunningSim) -> None:
    first = await sim.client.chat.completions.create(
        model=MODEL, messages=_messages("first?"), max_tokens=4)
    second = await sim.client.chat.completions.create(
        model=MODEL, messages=_messages("second question?"), max_tokens=4)
    assert first.object == "chat.completion" and first.choices[0].finish_reason == "length"
    assert first.usage.completion_tokens == 4 and len(first.choices[0].message.content) > 0
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    block = sim.worker.config.preset.block_size
    assert cached > 0 and cached % block == 0 and cached <= first.usage.prompt_tokens
    assert first.id.startswith("chatcmpl-") and first.system_fingerprint.startswith("vllm-")


async def test_chat_stream_with_usage(sim: RunningSim) -> None:
    await sim.client.chat.completions.create(model=MODEL, messages=_messages("warm"), max_tokens=1)
    stream = await sim.client.chat.completions.create(
        model=MODEL, messages=_messages("warm"), max_tokens=5, stream=True,
        stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = [c.choices[0].delta.content for c in chunks[1:-1]]
    assert len(text) == 5 and all(text)
    assert chunks[-2].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0


async def test_text_completions_stream_and_not(sim: RunningSim) -> None:
    done = await sim.client.completions.create(model=MODEL, prompt=SYSTEM, max_tokens=3)
    assert done.object == "text_completion" and done.usage.completion_tokens == 3
    stream = await sim.client.completions.create(
        model=MODEL, prompt=SYSTEM, max_tokens=3, stream=True,
        stream_options={"include_usage": True})
    chunks = [chunk async for chunk in stream]
    assert all(c.choices[0].text for c in chunks[:3])
    assert chunks[2].choices[0].finish_reason == "length"
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0


async def test_default_completion_max_tokens_is_16(sim: RunningSim) -> None:
    done = await sim.client.completions.create(model=MODEL, prompt="hello")
    assert done.usage.completion_tokens == 16


async def test_models_health_version_tokenize(sim: RunningSim) -> None:
    models = await sim.client.models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert models.data[0].model_extra["max_model_len"] == sim.worker.config.preset.max_model_len
    health = await sim.http.get("/health")
    assert health.status_code == 200 and health.content == b""
    assert (await sim.http.get("/version")).json() == {"version": "0.32.0"}
    tokenized = (await sim.http.post("/tokenize", json={"model": MODEL, "prompt": "a b c"})).json()
    assert tokenized["count"] == 3 and len(tokenized["tokens"]) == 3
    chat = (await sim.http.post("/tokenize", json={"messages": _messages("x")})).json()
    detok = (await sim.http.post("/detokenize", json={"tokens": tokenized["tokens"]})).json()
    assert chat["count"] > 100 and detok == {"prompt": "a b c"}


async def test_metrics_agree_with_usage(sim: RunningSim) -> None:
    cached = 0
    for question in ("a", "b", "c"):
        reply = await sim.client.chat.completions.create(
            model=MODEL, messages=_messages(question), max_tokens=2)
        cached += reply.usage.prompt_tokens_details.cached_tokens
    text = (await sim.http.get("/metrics")).text
    values = {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
              if line.startswith("vllm:") and "{engine" in line}
    assert values["vllm:prefix_cache_hits_total"] == cached > 0
    assert values["vllm:prompt_tokens_cached_total"] == cached
    assert values["vllm:generation_tokens_total"] == 6
    assert values["vllm:num_requests_running"] == 0
    assert 'block_size="16"' in text and "vllm:time_to_first_token_seconds_count" in text


async def test_errors_are_vllm_shaped(sim: RunningSim) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        await sim.client.chat.completions.create(model="nope", messages=_messages("x"))
    assert missing.value.body["code"] == 404 and missing.value.body["param"] == "model"
    with pytest.raises(openai.BadRequestError) as too_many:
        await sim.client.chat.completions.create(model=MODEL, messages=_messages("x"),
                                                 max_tokens=10**7)
    assert too_many.value.body["param"] == "max_tokens"
    bad = await sim.http.post("/v1/chat/completions", content=b"{not json",
                              headers={"content-type": "application/json"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == 400


async def test_reasoning_profile_streams_reasoning_before_content(sim_factory) -> None:  # type: ignore[no-untyped-def]
    running: RunningSim = await sim_factory(
        instant_config(output=OutputPolicy(OutputLength.parse("max"), reasoning_fraction=0.5)))
    stream = await running.client.chat.completions.create(
        model=MODEL, messages=_messages("think"), max_tokens=8, stream=True)
    kinds = []
    async for chunk in stream:
        delta = chunk.choices[0].delta
        extra = delta.model_extra or {}
        if extra.get("reasoning"):
            kinds.append("reasoning")
        elif delta.content:
            kinds.append("content")
    assert kinds == ["reasoning"] * 4 + ["content"] * 4
    whole = await running.client.chat.completions.create(
        model=MODEL, messages=_messages("think"), max_tokens=8)
    message = whole.choices[0].message
    assert message.model_extra["reasoning"] and message.content
    assert whole.usage.completion_tokens_details.reasoning_tokens == 4


async def test_same_seed_same_answers(sim_factory) -> None:  # type: ignore[no-untyped-def]
    async def answers(seed: int) -> list[tuple[str, str]]:
        running: RunningSim = await sim_factory(instant_config(seed=seed, output=OutputPolicy(
            OutputLength.parse("uniform:3:30"), seed=seed)))
        out = []
        for question in ("one", "two", "one"):
            reply = await running.client.chat.completions.create(
                model=MODEL, messages=_messages(question), max_tokens=64)
            out.append((reply.id, reply.choices[0].message.content))
        return out

    first, again, other = await answers(7), await answers(7), await answers(8)
    assert first == again and first != other
    assert first[0][1] == first[2][1]  # same prompt, same output on one worker


@pytest.mark.parametrize(
    "message, param",
    [
        ({"role": "user", "content": 42}, "messages.0.content"),
        ({"role": "user", "content": 4.5}, "messages.0.content"),
        ({"role": "user", "content": {"text": "x"}}, "messages.0.content"),
        ({"role": "user", "content": [7]}, "messages.0.content"),
        ({"role": "user", "content": [{"type": "text", "text": 7}]}, "messages.0.content"),
        ({"role": 3, "content": "x"}, "messages.0.role"),
    ],
)
async def test_a_message_of_the_wrong_shape_is_400_as_vllm_answers(sim: RunningSim, message: dict, param: str) -> None:
    """vLLM's pydantic request model refuses these with a 400; the simulator once raised a 500."""
    with pytest.raises(openai.BadRequestError) as caught:
        await sim.client.chat.completions.create(model=MODEL, messages=[message], max_tokens=2)  # type: ignore[list-item]
    assert caught.value.status_code == 400
    assert caught.value.body["code"] == 400 and caught.value.body["param"] == param
    assert caught.value.body["message"].startswith("1 validation error")
    tokenized = await sim.http.post("/tokenize", json={"model": MODEL, "messages": [message]})
    assert tokenized.status_code == 400
