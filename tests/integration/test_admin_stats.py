"""``GET /admin/stats`` over real HTTP, with the openai SDK as the client: every row's tokens, cost and
cancelled requests, and the TTFT of a stream whose client left after its first token.

A gateway of its own (two clusters, one endpoint each, different prices), so every figure is exact:
the fake's usage is 7 prompt tokens (4 cached) and 3 completion tokens per answered request.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway
from tests.support.ops import ADMIN_KEY, CLIENT_KEY, admin, toml_config
from tests.support.threads import wait_until


def _config(fake_a: FakeUpstream, fake_b: FakeUpstream) -> dict[str, Any]:
    return {
        "admin": {"api_key": ADMIN_KEY},
        "auth": {"api_keys": [CLIENT_KEY]},
        "health": {"interval_s": 60},
        "clusters": {
            "fast": {
                "endpoints": [{"name": "stats-a", "url": fake_a.base_url, "model": "qwen-fast"}],
                "price": {"input_per_mtok": 1.0, "cached_input_per_mtok": 0.5, "output_per_mtok": 2.0},
            },
            "big": {
                "endpoints": [{"name": "stats-b", "url": fake_b.base_url, "model": "qwen-big"}],
                "price": {"input_per_mtok": 2.0, "cached_input_per_mtok": 1.0, "output_per_mtok": 4.0},
            },
        },
        "models": {"qwen-fast": {"cluster": "fast"}, "qwen-big": {"cluster": "big"}},
    }


@pytest.fixture(scope="module")
def stats_gateway(tmp_path_factory: pytest.TempPathFactory, fake_a: FakeUpstream, fake_b: FakeUpstream) -> Iterator[RunningGateway]:
    path: Path = tmp_path_factory.mktemp("stats") / "kvgate.toml"
    path.write_text(toml_config(_config(fake_a, fake_b)))
    gateway = RunningGateway(_config(fake_a, fake_b), config_path=path, health_checks=False).start()
    yield gateway
    gateway.stop()


def _stats(gateway: RunningGateway) -> dict[str, Any]:
    reply = httpx.get(gateway.url + "/admin/stats", headers=admin(), timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()


def _record(gateway: RunningGateway, request_id: str) -> dict[str, Any]:
    reply = httpx.get(f"{gateway.url}/admin/requests/{request_id}", headers=admin(), timeout=10)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_rows_report_tokens_cost_and_cancelled_requests(stats_gateway: RunningGateway) -> None:
    messages = [{"role": "user", "content": "count me"}]
    with openai.OpenAI(base_url=stats_gateway.base_url, api_key=CLIENT_KEY, max_retries=0, timeout=30) as client:
        client.chat.completions.create(model="qwen-fast", messages=messages)  # type: ignore[arg-type]
        for _ in client.chat.completions.create(model="qwen-fast", messages=messages, stream=True):  # type: ignore[arg-type]
            pass
        client.chat.completions.create(model="qwen-big", messages=messages)  # type: ignore[arg-type]

        # a stream whose client leaves after the first token (the fake then waits forever)
        stream = client.chat.completions.create(
            model="qwen-fast", messages=messages, stream=True, extra_body={"fake": "hang_stream"},  # type: ignore[arg-type]
            extra_headers={"x-request-id": "left-1"},
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                assert chunk.choices[0].delta.content == "Hello"
                break
        stream.close()
    assert wait_until(lambda: _stats(stats_gateway)["endpoints"]["stats-a"]["cancelled"] == 1)

    left = _record(stats_gateway, "left-1")
    assert left["outcome"] == "cancelled"
    assert left["ttft_s"] is not None and 0 < left["ttft_s"] <= left["e2e_s"]  # "Hello" reached the client
    estimate = left["prompt_tokens"]  # no usage came: the director's prompt estimate, and one output event
    assert estimate > 0 and left["completion_tokens"] == 1 and left["cached_tokens"] == 0

    stats = _stats(stats_gateway)
    a, b = stats["endpoints"]["stats-a"], stats["endpoints"]["stats-b"]
    assert (a["requests"], a["errors"], a["cancelled"]) == (3, 0, 1)
    assert (a["input_tokens"], a["cached_tokens"], a["output_tokens"]) == (7 + 7 + estimate, 4 + 4, 3 + 3 + 1)
    # two answers at 3 uncached x $1/M + 4 cached x $0.5/M + 3 output x $2/M = $11e-6; the left one: estimate x $1/M + $2e-6
    assert a["cost_usd"] == pytest.approx((2 * 11 + estimate + 2) / 1e6)
    assert (b["requests"], b["errors"], b["cancelled"]) == (1, 0, 0)
    assert (b["input_tokens"], b["cached_tokens"], b["output_tokens"]) == (7, 4, 3)
    assert b["cost_usd"] == pytest.approx((3 * 2 + 4 * 1 + 3 * 4) / 1e6)
    # the model and cluster rows agree with their one endpoint's
    for table, name, endpoint in (("models", "qwen-fast", a), ("clusters", "fast", a), ("models", "qwen-big", b), ("clusters", "big", b)):
        row = stats[table][name]
        fields = ("requests", "errors", "cancelled", "input_tokens", "cached_tokens", "output_tokens")
        assert {f: row[f] for f in fields} == {f: endpoint[f] for f in fields}, (table, name)
        assert row["cost_usd"] == pytest.approx(endpoint["cost_usd"])
    # TTFT observed for both qwen-fast streams: the finished one and the one its client left
    assert stats_gateway.metric("kvgate_time_to_first_token_seconds_count", model="qwen-fast") == 2
    assert stats_gateway.metric("kvgate_endpoint_tokens_total", endpoint="stats-b", kind="cached") == 4
