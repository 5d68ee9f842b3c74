"""Schemathesis over the gateway's whole OpenAPI document (admin and OpenAI routes): no 500.

The schema is the app's own ``/openapi.json`` (FastAPI's routes plus the hand-written ``/v1``
paths). Each operation gets a bounded, derandomized Hypothesis run against a real kvgate over
loopback in front of a scripted upstream, with the admin key on ``/admin`` and a client key on
``/v1``. Host names in admin-added endpoint URLs never resolve (injected resolver), so the fuzzer
cannot make the test reach the network.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from gateway.app import create_app
from gateway.config import build_settings
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway
from tests.support.ops import ADMIN_KEY, CLIENT_KEY

SCHEMA = schemathesis.openapi.from_dict(create_app(build_settings({})).openapi())


async def _no_dns(host: str, port: int) -> Sequence[str]:
    raise OSError("name resolution is off in this test")


@pytest.fixture(scope="module")
def fuzzed(fake_a: FakeUpstream) -> Iterator[RunningGateway]:
    data = {
        "admin": {"api_key": ADMIN_KEY, "sync_interval_s": 0.2},
        "auth": {"api_keys": [CLIENT_KEY]},
        "health": {"interval_s": 60},
        "upstream": {"max_attempts": 1},
        "clusters": {"fast": {"endpoints": [{"name": "fz-a", "url": fake_a.base_url, "model": "qwen-fast"}]}},
        "models": {"qwen-fast": {"cluster": "fast"}},
    }
    gateway = RunningGateway(data, health_checks=False, resolver=_no_dns).start()
    yield gateway
    gateway.stop()


@SCHEMA.parametrize()
@settings(max_examples=12, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_no_operation_answers_500(case: schemathesis.Case, fuzzed: RunningGateway) -> None:
    key = ADMIN_KEY if case.path.startswith("/admin") else CLIENT_KEY
    response = case.call(base_url=fuzzed.url, headers={"Authorization": f"Bearer {key}"}, timeout=10)
    case.validate_response(response, checks=[not_a_server_error])
