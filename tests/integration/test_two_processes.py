"""Two real ``kvgate serve`` processes sharing the real Redis at 127.0.0.1:6379.

The replica tests elsewhere run two apps in one test process; these start two operating-system
processes from the console script, as a deployment would, and check what must hold across them:

* a key's requests-per-minute limit is enforced once, not once per process;
* the same long prompt prefix is sent to the same endpoint by both processes (the prefix index
  lives in the shared store).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench import procs
from tests.support.fake_upstream import FakeUpstream
from tests.support.ops import REDIS_URL, drop_prefix, redis_prefix, toml_config

SECRET = "sk-two-process-limited-key"


@pytest.fixture
def upstreams() -> Iterator[list[FakeUpstream]]:
    fakes = [FakeUpstream(f"up{i}").start() for i in range(3)]
    yield fakes
    for fake in fakes:
        fake.stop()


@pytest.fixture
def gateways(tmp_path: Path, upstreams: list[FakeUpstream]) -> Iterator[list[str]]:
    prefix = redis_prefix()
    base = procs.free_port_block(2)
    children = []
    try:
        for index in range(2):
            config = {
                "server": {"port": base + index, "log_level": "warning"},
                "auth": {"keys": [{"name": "limited", "key": SECRET, "rpm": 3}, {"name": "free", "key": "sk-two-process-free"}]},
                "state": {"backend": "redis", "redis_url": REDIS_URL, "key_prefix": prefix},
                "health": {"interval_s": 60},
                "clusters": {"fast": {"endpoints": [{"name": f"e{i}", "url": fake.base_url, "model": "m"} for i, fake in enumerate(upstreams)]}},
                "models": {"m": {"cluster": "fast"}},
            }
            path = tmp_path / f"kvgate-{index}.toml"
            path.write_text(toml_config(config))
            children.append(procs.start(f"kvgate-{index}", procs.kvgate_command(path), tmp_path))
        urls = [f"http://127.0.0.1:{base + index}" for index in range(2)]
        for url, child in zip(urls, children):
            asyncio.run(procs.wait_ready(f"{url}/health", child))
        yield urls
    finally:
        for child in children:
            child.stop()
        drop_prefix(prefix)


def chat(url: str, key: str, content: str = "hello") -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": 5}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=10)


def test_rpm_limit_holds_across_two_processes(gateways: list[str]) -> None:
    statuses = [chat(gateways[i % 2], SECRET).status_code for i in range(6)]
    assert statuses.count(200) == 3, statuses
    refused = chat(gateways[0], SECRET)
    assert refused.status_code == 429
    assert int(refused.headers["retry-after"]) >= 1
    assert refused.json()["error"]["type"]


def test_same_prefix_goes_to_the_same_endpoint_from_both_processes(gateways: list[str]) -> None:
    document = "Shared reference document. " + " ".join(f"Clause {i} says the fee is {i * 3} euros." for i in range(300))
    served = []
    for round_ in range(3):
        for url in gateways:
            response = chat(url, "sk-two-process-free", document + f" Question {round_}: what is clause 7?")
            assert response.status_code == 200
            served.append(response.headers["x-kvgate-endpoint"])
    assert len(set(served)) == 1, served
