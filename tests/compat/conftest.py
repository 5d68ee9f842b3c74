"""Fixtures of the compat tier: kvgate in front of a scripted endpoint, driven by the openai SDK.

The gateway serves ``qwen-fast`` (alias ``fast-alias``) on cluster ``fast``, whose endpoint
``fast-c`` serves it under another name (``qwen-served``: kvgate renames the model), and
``deepseek-r1`` (alias ``r1``) on ``reasoning``, whose endpoint serves the same name (kvgate
forwards the client's bytes untouched). The SDK clients never retry (``max_retries=0``) and record
the exact bytes of each request they send in ``sent``.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway

CLIENT_KEY = "sk-compat-client"


@pytest.fixture(scope="session")
def fake() -> Iterator[FakeUpstream]:
    upstream = FakeUpstream("c").start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="session")
def gateway(fake: FakeUpstream) -> Iterator[RunningGateway]:
    running = RunningGateway(
        {
            # Error tests fail on purpose: keep the breaker closed, no 429 cooldown, Retry-After waits short.
            "circuit": {"consecutive_failures": 1_000_000, "min_requests": 1_000_000},
            "upstream": {"max_retry_after_s": 0.05, "max_rate_limit_cooldown_s": 0},
            "clusters": {
                "fast": {"endpoints": [{"name": "fast-c", "url": fake.base_url, "model": "qwen-served"}]},
                "reasoning": {"endpoints": [{"name": "reason-c", "url": fake.base_url, "model": "deepseek-r1"}]},
            },
            "models": {
                "qwen-fast": {"cluster": "fast", "aliases": ["fast-alias"]},
                "deepseek-r1": {"cluster": "reasoning", "aliases": ["r1"]},
            },
        }
    ).start()
    yield running
    running.stop()


@pytest.fixture(scope="session")
def sent() -> list[bytes]:
    """Bodies of the requests the SDK clients sent, in order."""
    return []


@pytest.fixture(scope="session")
def client(gateway: RunningGateway, sent: list[bytes]) -> Iterator[openai.OpenAI]:
    def record(request: httpx.Request) -> None:
        sent.append(request.read())

    with httpx.Client(event_hooks={"request": [record]}, timeout=10) as http_client:
        with openai.OpenAI(base_url=gateway.base_url, api_key=CLIENT_KEY, max_retries=0, http_client=http_client) as sdk:
            yield sdk


@pytest.fixture(scope="session")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as raw:
        yield raw
