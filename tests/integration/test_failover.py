"""Failover before the first byte: a broken endpoint is skipped and the client never sees it."""

from __future__ import annotations

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway, chat_body, streamed_text

CHAT = "/v1/chat/completions"

# Round-robin (see conftest): each request starts one endpoint further, so four requests start
# twice with the broken one.
ROUNDS = 4


BROKEN = [
    # (id, cluster, reason recorded against its broken endpoint, stream)
    ("500", "flaky", "http_500", False),
    ("500-stream", "flaky", "http_500", True),
    ("refused", "refused", "connect", False),
    ("refused-stream", "refused", "connect", True),
    ("first-event-error", "erroring", "stream_error", True),
    ("empty-stream", "emptying", "empty_body", True),
]


@pytest.mark.parametrize(("cluster", "reason", "stream"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_broken_endpoint_is_skipped_before_the_first_byte(
    failover_gateway: RunningGateway,
    fake_b: FakeUpstream,
    http: httpx.Client,
    cluster: str,
    reason: str,
    stream: bool,
) -> None:
    bad, good = f"{cluster}-bad", f"{cluster}-good"
    failures = failover_gateway.metric("kvgate_upstream_failures_total", endpoint=bad, reason=reason)
    successes = failover_gateway.metric("kvgate_requests_total", endpoint=good, outcome="success")
    for _ in range(ROUNDS):
        response = http.post(failover_gateway.url + CHAT, json=chat_body(model=cluster, stream=stream))
        assert response.status_code == 200, response.text
        assert response.headers["x-kvgate-endpoint"] == good
        assert response.headers["x-kvgate-cluster"] == cluster
        if stream:
            assert response.text.endswith("data: [DONE]\n\n")
            assert streamed_text(response.content) == "Hello from b"
        else:
            assert response.json()["choices"][0]["message"]["content"] == "echo from b"
        assert fake_b.last["body"]["model"] == cluster
    assert failover_gateway.metric("kvgate_upstream_failures_total", endpoint=bad, reason=reason) >= failures + ROUNDS // 2
    assert failover_gateway.metric("kvgate_requests_total", endpoint=good, outcome="success") == successes + ROUNDS
    assert failover_gateway.metric("kvgate_requests_total", endpoint=bad) == 0
    assert failover_gateway.metric("kvgate_endpoint_in_flight", endpoint=bad) == 0
    assert failover_gateway.metric("kvgate_endpoint_in_flight", endpoint=good) == 0


def test_both_endpoints_answer_in_turn(failover_gateway: RunningGateway, http: httpx.Client) -> None:
    served = {http.post(failover_gateway.url + CHAT, json=chat_body(model="pair")).headers["x-kvgate-endpoint"] for _ in range(4)}
    assert served == {"pair-a", "pair-b"}


def test_client_error_is_not_failed_over(
    failover_gateway: RunningGateway, fake_a: FakeUpstream, fake_b: FakeUpstream, http: httpx.Client
) -> None:
    seen = len(fake_a.requests) + len(fake_b.requests)
    response = http.post(failover_gateway.url + CHAT, json=chat_body(model="pair", fake="status:422"))
    assert response.status_code == 422
    assert len(fake_a.requests) + len(fake_b.requests) == seen + 1


def test_every_endpoint_failing_is_502_naming_the_last(
    failover_gateway: RunningGateway, fake_a: FakeUpstream, fake_b: FakeUpstream, http: httpx.Client
) -> None:
    seen_a, seen_b = len(fake_a.requests), len(fake_b.requests)
    response = http.post(failover_gateway.url + CHAT, json=chat_body(model="pair", fake="status:500"))
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_error"
    assert (len(fake_a.requests), len(fake_b.requests)) == (seen_a + 1, seen_b + 1)
