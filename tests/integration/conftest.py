"""Fixtures of the integration tier: scripted upstreams and real kvgate servers over loopback.

Everything here is started once per test session, in threads (see ``tests/support``), and only
when a test first asks for it. Tests share these servers, so they assert on *deltas* of
``/metrics`` and of the fakes' counters, and wait for the gateway to settle
(:func:`tests.support.threads.wait_until`) before they return. Their circuit breakers never trip
(:data:`NEVER_EJECT`), so one test's deliberate failures cannot turn another's request into a 503.

Gateways:
    ``gateway``           the main one: public model ``qwen-fast`` (alias ``fast-alias``) on cluster
                          ``fast`` (endpoint ``fast-a`` serves it as ``qwen-served``), ``deepseek-r1``
                          (alias ``r1``) on ``reasoning`` (``reason-a``, same served name), and
                          cluster ``dead`` whose one endpoint refuses connections; bodies above
                          4096 bytes are refused.
    ``failover_gateway``  two-endpoint clusters: ``pair`` (two good fakes), and a broken endpoint
                          next to a good one in ``flaky`` (always 500), ``refused`` (a refusing
                          port), ``erroring`` (streams open with an in-band error) and
                          ``emptying`` (streams are empty). Round-robin and never ejected: each
                          request starts one endpoint further than the one before.
    ``auth_gateway``      client keys required (:data:`CLIENT_KEY`).
    ``dead_gateway``      its only endpoint refuses connections; health checks every 0.1 s.
    ``timeout_gateway``   gives up on a silent endpoint after 0.5 s (``[upstream.timeouts]``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RefusingPort, RunningGateway

if TYPE_CHECKING:
    from tests.integration.test_apis import Sim

CLIENT_KEY = "sk-kvgate-test-right-key"
MAX_BODY = 4096


@pytest.fixture(scope="session")
def fake_a() -> Iterator[FakeUpstream]:
    fake = FakeUpstream("a").start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def fake_b() -> Iterator[FakeUpstream]:
    fake = FakeUpstream("b").start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def fake_broken() -> Iterator[FakeUpstream]:
    fake = FakeUpstream("broken", script="status:500").start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def fake_first_error() -> Iterator[FakeUpstream]:
    fake = FakeUpstream("first-error", script="first_error").start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def fake_empty() -> Iterator[FakeUpstream]:
    fake = FakeUpstream("empty", script="empty_stream").start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def refusing() -> Iterator[RefusingPort]:
    port = RefusingPort()
    yield port
    port.close()


# Shared gateways see many deliberate failures; neither the circuit breaker, health checks nor a
# 429's rate-limit cooldown may take an endpoint out of rotation behind a later test's back.
# Retry-After waits stay short.
NEVER_EJECT = {
    "circuit": {"consecutive_failures": 1_000_000, "min_requests": 1_000_000},
    "health": {"unhealthy_threshold": 1_000_000},
}
SHORT_RETRY_WAIT = {"max_retry_after_s": 0.05, "max_rate_limit_cooldown_s": 0}


def _serve(data: dict, **app_kwargs: object) -> Iterator[RunningGateway]:
    gateway = RunningGateway(data, **app_kwargs).start()
    yield gateway
    gateway.stop()


@pytest.fixture(scope="session")
def gateway(fake_a: FakeUpstream, refusing: RefusingPort) -> Iterator[RunningGateway]:
    yield from _serve(
        {
            "server": {"max_body_bytes": MAX_BODY},
            "upstream": SHORT_RETRY_WAIT,
            "circuit": NEVER_EJECT["circuit"],
            "health": {"interval_s": 0.5, "unhealthy_threshold": 2},
            "clusters": {
                "fast": {"endpoints": [{"name": "fast-a", "url": fake_a.base_url, "model": "qwen-served"}]},
                "reasoning": {"endpoints": [{"name": "reason-a", "url": fake_a.base_url, "model": "deepseek-r1"}]},
                "dead": {"endpoints": [{"name": "dead-0", "url": refusing.base_url, "model": "dead-model"}]},
            },
            "models": {
                "qwen-fast": {"cluster": "fast", "aliases": ["fast-alias"]},
                "deepseek-r1": {"cluster": "reasoning", "aliases": ["r1"]},
            },
        }
    )


@pytest.fixture(scope="session")
def failover_gateway(
    fake_a: FakeUpstream,
    fake_b: FakeUpstream,
    fake_broken: FakeUpstream,
    fake_first_error: FakeUpstream,
    fake_empty: FakeUpstream,
    refusing: RefusingPort,
) -> Iterator[RunningGateway]:
    yield from _serve(
        {
            "upstream": SHORT_RETRY_WAIT,
            "routing": {"policy": "round-robin"},  # each request starts one endpoint further
            **NEVER_EJECT,
            "clusters": {
                "pair": {
                    "endpoints": [
                        {"name": "pair-a", "url": fake_a.base_url, "model": "pair"},
                        {"name": "pair-b", "url": fake_b.base_url, "model": "pair"},
                    ]
                },
                "flaky": {
                    "endpoints": [
                        {"name": "flaky-bad", "url": fake_broken.base_url, "model": "flaky"},
                        {"name": "flaky-good", "url": fake_b.base_url, "model": "flaky"},
                    ]
                },
                "refused": {
                    "endpoints": [
                        {"name": "refused-bad", "url": refusing.base_url, "model": "refused"},
                        {"name": "refused-good", "url": fake_b.base_url, "model": "refused"},
                    ]
                },
                "erroring": {
                    "endpoints": [
                        {"name": "erroring-bad", "url": fake_first_error.base_url, "model": "erroring"},
                        {"name": "erroring-good", "url": fake_b.base_url, "model": "erroring"},
                    ]
                },
                "emptying": {
                    "endpoints": [
                        {"name": "emptying-bad", "url": fake_empty.base_url, "model": "emptying"},
                        {"name": "emptying-good", "url": fake_b.base_url, "model": "emptying"},
                    ]
                },
            },
        }
    )


@pytest.fixture(scope="session")
def auth_gateway(fake_a: FakeUpstream) -> Iterator[RunningGateway]:
    yield from _serve(
        {
            "auth": {"api_keys": [CLIENT_KEY]},
            **NEVER_EJECT,
            "clusters": {"fast": {"endpoints": [{"name": "auth-a", "url": fake_a.base_url, "model": "qwen-fast"}]}},
            "models": {"qwen-fast": {"cluster": "fast"}},
        }
    )


@pytest.fixture(scope="session")
def dead_gateway(refusing: RefusingPort) -> Iterator[RunningGateway]:
    yield from _serve(
        {
            "health": {"interval_s": 0.1, "timeout_s": 0.5},
            "clusters": {"dead": {"endpoints": [{"name": "dead-only", "url": refusing.base_url, "model": "m"}]}},
        }
    )


@pytest.fixture(scope="session")
def timeout_gateway(fake_a: FakeUpstream) -> Iterator[RunningGateway]:
    yield from _serve(
        {
            "upstream": {"timeouts": {"first_byte_s": 0.5, "idle_s": 0.5, "total_s": 0.5}},
            **NEVER_EJECT,
            "clusters": {"slow": {"endpoints": [{"name": "slow-a", "url": fake_a.base_url, "model": "slow"}]}},
        }
    )


@pytest.fixture(scope="session")
def http() -> Iterator[httpx.Client]:
    """One pooled httpx client for exact status, header and body checks."""
    with httpx.Client(timeout=httpx.Timeout(10.0)) as client:
        yield client


@pytest.fixture(scope="module")
def sim() -> Iterator[Sim]:
    """A simulated vLLM worker serving ``smollm2`` (``tests.integration.test_apis.Sim``), one per module."""
    from tests.integration.test_apis import MODEL, Sim

    worker = Sim(MODEL)
    worker.thread.start()
    yield worker
    worker.thread.stop()
