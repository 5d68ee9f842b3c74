"""Long prompts take their heavy steps through the turn gate (``gateway/turns.py``, issue 23):
the parse, the prefix key and match, and the index insert each go through it, the answers are
an ungated gateway gives, the prefix is still recorded where the prompt went, a small request
passes no gate, and concurrent long requests all answer and leave nothing queued.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import openai
import pytest

from tests.integration.conftest import CLIENT_KEY
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway

HEAVY = 16 * 1024


@pytest.fixture(scope="module")
def gated(fake_a: FakeUpstream, fake_b: FakeUpstream) -> Iterator[RunningGateway]:
    running = RunningGateway(
        {
            "server": {"heavy_step_bytes": HEAVY},
            "auth": {"api_keys": [CLIENT_KEY]},
            "clusters": {"fast": {"endpoints": [
                {"name": "hs-a", "url": fake_a.base_url, "model": "qwen-served"},
                {"name": "hs-b", "url": fake_b.base_url, "model": "qwen-served"},
            ]}},
            "models": {"qwen-fast": {"cluster": "fast"}},
        },
    ).start()
    yield running
    running.stop()


def _eventually(condition, what: str) -> None:  # noqa: ANN001
    """The close-out runs just after the answer left: poll (10 s at most) for what it does."""
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.01)


def _gate(running: RunningGateway):  # noqa: ANN202
    gate = running.app.state.container.proxy.turns
    assert gate is not None and gate.min_bytes == HEAVY
    return gate


def test_a_long_prompt_takes_three_gated_steps_and_is_answered(gated: RunningGateway, fake_a: FakeUpstream, fake_b: FakeUpstream) -> None:
    gate = _gate(gated)
    client = openai.OpenAI(base_url=gated.base_url, api_key=CLIENT_KEY, max_retries=0)
    prompt = "a long shared document. " * (2 * HEAVY // 24)
    before = gate.steps
    first = client.chat.completions.with_raw_response.create(
        model="qwen-fast", messages=[{"role": "system", "content": prompt}, {"role": "user", "content": "q1"}])
    assert first.parse().choices[0].message.content
    # parse, schedule (key and match), the commit's index insert (in the close-out, just after the answer left)
    _eventually(lambda: gate.steps - before == 3, "three gated steps")
    endpoint = first.headers["x-kvgate-endpoint"]
    forwarded = (fake_a if endpoint == "hs-a" else fake_b).last["body"]
    assert forwarded["messages"][0]["content"] == prompt and forwarded["model"] == "qwen-served"
    # the insert went through the gate and still landed: the same document goes where it went
    second = client.chat.completions.with_raw_response.create(
        model="qwen-fast", messages=[{"role": "system", "content": prompt}, {"role": "user", "content": "q2"}])
    assert second.headers["x-kvgate-endpoint"] == endpoint
    _eventually(lambda: gate.steps - before >= 6, "three more")
    assert gate.steps - before == 6 and gate.queued == 0


def test_a_small_request_passes_no_gate(gated: RunningGateway) -> None:
    gate = _gate(gated)
    client = openai.OpenAI(base_url=gated.base_url, api_key=CLIENT_KEY, max_retries=0)
    before = gate.steps
    client.chat.completions.create(model="qwen-fast", messages=[{"role": "user", "content": "short"}])
    assert gate.steps == before


async def test_concurrent_long_prompts_all_answer_and_leave_the_gate_empty(gated: RunningGateway) -> None:
    gate = _gate(gated)
    async with openai.AsyncOpenAI(base_url=gated.base_url, api_key=CLIENT_KEY, max_retries=0) as client:
        async def ask(index: int) -> str:
            document = f"document {index}: " + "x" * (HEAVY + 1000)
            answer = await client.chat.completions.create(
                model="qwen-fast", messages=[{"role": "user", "content": document}])
            return answer.choices[0].message.content or ""

        answers = await asyncio.gather(*(ask(i) for i in range(16)))
    assert all(answers)
    assert gate.queued == 0
