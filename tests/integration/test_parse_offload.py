"""Bodies over ``[server] parse_offload_bytes`` are parsed in a worker process, off the event loop
(issue 23, long prompts): the client gets the same answer and the endpoint the same bytes as an
inline parse, and a bad large body is the same 400 as a bad small one.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import orjson
import pytest

from tests.integration.conftest import CLIENT_KEY
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway, error_shape_ok

LIMIT = 4096


@pytest.fixture(scope="module")
def offloading(fake_a: FakeUpstream) -> Iterator[RunningGateway]:
    running = RunningGateway(
        {
            "server": {"parse_offload_bytes": LIMIT},
            "auth": {"api_keys": [CLIENT_KEY]},
            "clusters": {"fast": {"endpoints": [{"name": "po-a", "url": fake_a.base_url, "model": "qwen-served"}]}},
            "models": {"qwen-fast": {"cluster": "fast"}},
        },
    ).start()
    yield running
    running.stop()


def test_a_large_body_is_parsed_by_the_worker_and_answered(offloading: RunningGateway, fake_a: FakeUpstream) -> None:
    client = openai.OpenAI(base_url=offloading.base_url, api_key=CLIENT_KEY, max_retries=0)
    prompt = "long prompt " * (LIMIT // 6)
    answer = client.chat.completions.create(model="qwen-fast", messages=[{"role": "user", "content": prompt}])
    assert answer.choices[0].message.content
    forwarded = fake_a.last["body"]
    assert forwarded["messages"][0]["content"] == prompt
    assert forwarded["model"] == "qwen-served"
    offload = offloading.app.state.container.proxy._parse_offload
    assert offload is not None and offload.inline_limit == LIMIT
    assert any(worker is not None and worker.alive for worker in offload._pool)  # the body went to a worker


def test_a_bad_large_body_is_the_same_400_as_inline(offloading: RunningGateway) -> None:
    big = orjson.dumps({"model": "qwen-fast", "messages": "x" * (2 * LIMIT)})
    small = orjson.dumps({"model": "qwen-fast", "messages": "x"})
    headers = {"Authorization": f"Bearer {CLIENT_KEY}", "Content-Type": "application/json"}
    with httpx.Client(timeout=10) as http:
        answers = [http.post(offloading.url + "/v1/chat/completions", content=body, headers=headers) for body in (big, small)]
    for response in answers:
        assert response.status_code == 400, response.text
        assert error_shape_ok(response.json())
    assert answers[0].json()["error"]["param"] == answers[1].json()["error"]["param"]
    assert answers[0].json()["error"]["code"] == answers[1].json()["error"]["code"]
