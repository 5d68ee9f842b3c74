"""Prefix affinity on an idle cluster (issue 16, item 9), through a real kvgate with the default profile.

40 sequential requests sharing one system prompt over four idle endpoints were spread
10/10/10/10 by ``bounded-share`` (floor 8): the shared prefix was computed four times. With the
share bound applied only to loaded endpoints (``docs/routing.md``), they all go to one endpoint;
distinct prefixes still spread. The official ``openai`` SDK is the client.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import openai
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway

SYSTEM = "You are the support agent of tenant {n}. Follow the policy handbook, cite sections, never guess. " * 30


@pytest.fixture(scope="module")
def gateway() -> Iterator[RunningGateway]:
    fakes = [FakeUpstream(f"idle{i}").start() for i in range(4)]
    running = RunningGateway(
        {
            "health": {"interval_s": 60.0},
            "clusters": {"pool": {"endpoints": [{"name": f"w{i}", "url": f.base_url, "model": "served"} for i, f in enumerate(fakes)]}},
            "models": {"pooled": {"cluster": "pool"}},
        },
        health_checks=False,
    ).start()
    yield running
    running.stop()
    for fake in fakes:
        fake.stop()


def _homes(client: openai.OpenAI, tenant: int, count: int) -> list[str]:
    homes = []
    for question in range(count):
        raw = client.chat.completions.with_raw_response.create(
            model="pooled", max_tokens=4,
            messages=[{"role": "system", "content": SYSTEM.format(n=tenant)}, {"role": "user", "content": f"Question {question}?"}],
        )
        homes.append(raw.headers["x-kvgate-endpoint"])
    return homes


def test_sequential_requests_sharing_a_prompt_stay_on_one_idle_endpoint(gateway: RunningGateway) -> None:
    with openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0) as client:
        homes = _homes(client, 0, 40)
        assert len(set(homes)) == 1, Counter(homes)
        others = {_homes(client, tenant, 1)[0] for tenant in range(1, 9)}
    assert len(others | set(homes)) >= 3  # distinct prefixes still spread (assignments scorer)
