"""Issue 17, Low: a Redis outage writes one warning per outage, not one per request.

The gateway's Redis is a refused port; a key with a limit is served fail-open
(``quotas.on_store_error = "allow"``). Before the fix every request's lost usage record logged
its own ``usage records lost`` warning; now the first is logged, the rest are counted
(``kvgate_state_store_errors_total``) and summed up when the store is reachable again.
"""

from __future__ import annotations

import logging

import openai
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RefusingPort
from tests.support.security_keys import MESSAGES, NEVER_EJECT, serve
from tests.support.threads import wait_until

KEY = "sk-security-outage-0123456789"


def test_a_redis_outage_logs_once_not_per_request(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeUpstream("outage").start()
    dead = RefusingPort()
    config = {
        "auth": {"keys": [{"name": "metered", "key": KEY, "rpm": 1000}]},
        "state": {"backend": "redis", "redis_url": f"redis://127.0.0.1:{dead.port}/0", "key_prefix": "kvgate-test-outage"},
        **NEVER_EJECT,
        "clusters": {"fast": {"endpoints": [{"name": "outage-0", "url": fake.base_url, "model": "qwen-fast"}]}},
        "models": {"qwen-fast": {"cluster": "fast"}},
    }
    try:
        with caplog.at_level(logging.WARNING, logger="kvgate"), serve(config, health_checks=False) as gateway:
            with openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0) as client:
                for _ in range(20):
                    client.chat.completions.create(model="qwen-fast", messages=MESSAGES)
            assert wait_until(lambda: gateway.metric("kvgate_state_store_errors_total", operation="usage_settle") >= 1)
            assert wait_until(lambda: gateway.app.state.container.ops.gate.queued == 0)
            lost = gateway.metric("kvgate_state_store_errors_total", operation="usage_settle")
    finally:
        fake.stop()
        dead.close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "kvgate.keys" and r.levelno >= logging.WARNING]
    usage_lines = [message for message in warnings if message.startswith("usage records lost")]
    assert lost >= 1
    assert len(usage_lines) == 1, usage_lines  # before the fix: one per failed batch (about one per request)
    assert len(warnings) <= 2  # plus the quota admission's single warning
