"""Many requests at once, ending every way a request can end: no in-flight slot leaks."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway, chat_body
from tests.support.threads import wait_until

CHAT = "/v1/chat/completions"

MIX = [
    # (fake script, stream, expected status)
    ("ok", False, 200),
    ("ok", True, 200),
    ("rich", False, 200),
    ("inband_error", True, 200),
    ("truncate", True, 200),
    ("first_error", True, 502),
    ("empty_stream", True, 502),
    ("status:400", False, 400),
    ("status:400", True, 400),
    ("status:500", False, 502),
    ("status:500", True, 502),
]


def test_concurrent_requests_leave_nothing_in_flight(gateway: RunningGateway, fake_a: FakeUpstream) -> None:
    cases = MIX * 3

    def send(case: tuple[str, bool, int]) -> tuple[int, int]:
        script, stream, expected = case
        with httpx.Client(timeout=10) as client:
            response = client.post(gateway.url + CHAT, json=chat_body(fake=script, stream=stream))
            return response.status_code, expected

    active = fake_a.active
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        results = list(pool.map(send, cases))
    assert [status for status, _ in results] == [expected for _, expected in results]
    assert wait_until(lambda: gateway.metric("kvgate_endpoint_in_flight", endpoint="fast-a") == 0)
    assert gateway.endpoint("fast-a").in_flight == 0
    assert wait_until(lambda: fake_a.active == active)
