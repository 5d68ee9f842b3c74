"""A client that goes away cancels the upstream request, and is never the endpoint's fault.

Each test writes one request on a raw socket, waits until the fake endpoint is busy with it (and,
for streams, until the first bytes reached the client when there are any), then closes the
socket. The fake's handler must then be cancelled (kvgate dropped the upstream connection), the
in-flight gauge must return to 0, and the request must be counted as ``cancelled``.
"""

from __future__ import annotations

import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway, chat_body, metric, raw_request, read_until
from tests.support.threads import wait_until

CHAT = "/v1/chat/completions"


def _snapshot(gateway: RunningGateway) -> dict[str, float]:
    text = gateway.metrics_text()
    return {
        "cancelled": metric(text, "kvgate_requests_total", endpoint="fast-a", outcome="cancelled"),
        "other_outcomes": sum(
            metric(text, "kvgate_requests_total", endpoint="fast-a", outcome=outcome)
            for outcome in ("success", "upstream_error", "client_error")
        ),
        "failures": metric(text, "kvgate_upstream_failures_total", endpoint="fast-a"),
        "in_flight": metric(text, "kvgate_endpoint_in_flight", endpoint="fast-a"),
    }


CASES = [
    # (id, script, stream, what the client has received when it leaves)
    ("before-headers", "hang", False, None),
    ("before-headers-stream", "hang", True, None),
    ("before-body", "stall", False, None),
    ("before-first-token", "stall", True, None),
    ("mid-stream", "hang_stream", True, b"Hello"),
]


@pytest.mark.parametrize(("script", "stream", "received"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_client_disconnect_cancels_the_upstream(
    gateway: RunningGateway, fake_a: FakeUpstream, script: str, stream: bool, received: bytes | None
) -> None:
    before = _snapshot(gateway)
    active, cancelled = fake_a.active, fake_a.cancelled
    sock = raw_request(gateway.port, CHAT, chat_body(fake=script, stream=stream))
    try:
        assert wait_until(lambda: fake_a.active == active + 1), "the request never reached the endpoint"
        assert gateway.metric("kvgate_endpoint_in_flight", endpoint="fast-a") == before["in_flight"] + 1
        if received is not None:
            head = read_until(sock, received)
            assert head.startswith(b"HTTP/1.1 200"), head
            assert received in head
    finally:
        sock.close()
    assert wait_until(lambda: gateway.metric("kvgate_endpoint_in_flight", endpoint="fast-a") == 0)
    assert wait_until(lambda: _snapshot(gateway)["cancelled"] == before["cancelled"] + 1)
    after = _snapshot(gateway)
    assert after["failures"] == before["failures"], "a client's cancel was blamed on the endpoint"
    assert after["other_outcomes"] == before["other_outcomes"]
    assert gateway.endpoint("fast-a").in_flight == 0
    assert wait_until(lambda: fake_a.active == active), "the upstream request was not aborted"
    assert fake_a.cancelled == cancelled + 1
