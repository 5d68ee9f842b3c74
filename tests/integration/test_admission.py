"""Admission over real HTTP with the openai SDK: queue then serve, spill over, shed, a queued client leaving.

Cluster ``busy`` has one endpoint with one slot (``slots_per_endpoint = 1``); a "holder" request
(the fake's ``slow_stream``, about 2 s) takes it, and the request under test then finds the
cluster saturated. Routes on ``busy``: ``patient`` (wait limit 30 s: it queues), ``spilling``
(0.3 s, ``spill_to = ["spare"]``) and ``strict`` (0.3 s, no spill target: it is shed). The
``plain`` gateway is the same configuration with admission off: today's behaviour.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway, chat_body
from tests.support.threads import wait_until

CHAT = "/v1/chat/completions"
ADMIN_KEY = "admin-key-of-the-admission-tests"
ADMIN = {"Authorization": f"Bearer {ADMIN_KEY}"}


def _config(fake_a: FakeUpstream, fake_b: FakeUpstream, enabled: bool) -> dict[str, Any]:
    one_slot = {"slots_per_endpoint": 1, "service_prior_s": 2.0}
    return {
        "admission": {"enabled": enabled, "max_queue_wait_s": 30.0},
        "admin": {"api_key": ADMIN_KEY},
        "circuit": {"consecutive_failures": 1_000_000, "min_requests": 1_000_000},
        "health": {"unhealthy_threshold": 1_000_000},
        "clusters": {
            "busy": {"endpoints": [{"name": "busy-0", "url": fake_a.base_url, "model": "m"}], "selection": one_slot},
            "spare": {"endpoints": [{"name": "spare-0", "url": fake_b.base_url, "model": "m"}]},
        },
        "routes": {
            "patient": {"clusters": ["busy"], "max_queue_wait_s": 30.0},
            "spilling": {"clusters": ["busy", "spare"], "max_queue_wait_s": 0.3, "spill_to": ["spare"]},
            "strict": {"clusters": ["busy"], "max_queue_wait_s": 0.3},
        },
        "models": {
            "m-patient": {"route": "patient"},
            "m-spilling": {"route": "spilling"},
            "m-strict": {"route": "strict"},
        },
    }


@pytest.fixture(scope="module")
def admitting(fake_a: FakeUpstream, fake_b: FakeUpstream) -> Iterator[RunningGateway]:
    gateway = RunningGateway(_config(fake_a, fake_b, True)).start()
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def plain(fake_a: FakeUpstream, fake_b: FakeUpstream) -> Iterator[RunningGateway]:
    gateway = RunningGateway(_config(fake_a, fake_b, False)).start()
    yield gateway
    gateway.stop()


def _client(gateway: RunningGateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0, timeout=30)


class Holder:
    """A slow stream on cluster ``busy`` (its one slot) in a thread, until it ends (about 2 s)."""

    def __init__(self, gateway: RunningGateway) -> None:
        self.gateway = gateway
        self.status: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        body = chat_body(model="busy", stream=True, fake="slow_stream")
        with httpx.stream("POST", self.gateway.url + CHAT, json=body, timeout=30) as response:
            self.status = response.status_code
            for _ in response.iter_bytes():
                pass

    def __enter__(self) -> Holder:
        self.thread.start()
        assert wait_until(lambda: self.gateway.endpoint("busy-0").in_flight == 1), "the holder never started"
        return self

    def __exit__(self, *exc: object) -> None:
        self.thread.join(10)
        assert self.status == 200


def _settled(gateway: RunningGateway) -> None:
    """Nothing in flight, nothing queued (no leaked slot or waiter)."""
    assert wait_until(lambda: gateway.endpoint("busy-0").in_flight == 0 and gateway.endpoint("spare-0").in_flight == 0)
    assert wait_until(lambda: gateway.metric("kvgate_admission_queue_depth", cluster="busy") == 0)


def test_a_saturated_cluster_queues_the_request_then_serves_it(admitting: RunningGateway) -> None:
    client = _client(admitting)
    queued = admitting.metric("kvgate_admission_decisions_total", cluster="busy", action="admit", reason="queued")
    with Holder(admitting):
        started = time.monotonic()
        raw = client.chat.completions.with_raw_response.create(
            model="m-patient", messages=[{"role": "user", "content": "hi"}]
        )
        waited = time.monotonic() - started
        assert admitting.endpoint("busy-0").in_flight <= 1, "the engine got more than its slots"
    assert raw.parse().choices[0].message.content == "echo from a"
    assert raw.headers["x-kvgate-route"] == "patient; reason=route"
    assert waited > 0.5, "it did not wait for the holder's slot"
    assert admitting.metric(
        "kvgate_admission_decisions_total", cluster="busy", action="admit", reason="queued"
    ) == queued + 1
    records = httpx.get(admitting.url + "/admin/requests?limit=5", headers=ADMIN, timeout=10).json()["data"]
    mine = next(r for r in records if r["model"] == "m-patient")
    # It waited in the gateway queue. How long depends on when it got there under load; the client-side
    # wait above and the queued decision count say it waited for the holder slot.
    assert mine["queue_ms"] > 0
    _settled(admitting)


def test_a_saturated_primary_spills_to_its_target_which_is_not_a_failure(admitting: RunningGateway) -> None:
    client = _client(admitting)
    failovers = admitting.metric("kvgate_failovers_total")
    with Holder(admitting):
        raw = client.chat.completions.with_raw_response.create(
            model="m-spilling", messages=[{"role": "user", "content": "hi"}]
        )
    assert raw.headers["x-kvgate-route"] == "spilling; reason=spill_saturated"
    assert raw.headers["x-kvgate-cluster"] == "spare"
    assert raw.parse().choices[0].message.content == "echo from b"
    busy = admitting.endpoint("busy-0")
    assert busy.circuit.value == "closed" and busy.routable and busy.last_error is None
    assert admitting.metric("kvgate_failovers_total") == failovers, "a spill is not a failover"
    assert admitting.metric("kvgate_admission_decisions_total", cluster="spare", action="spill") >= 1
    _settled(admitting)


def test_explain_shows_the_admission_decision_without_side_effects(admitting: RunningGateway) -> None:
    with Holder(admitting):
        answer = httpx.post(
            admitting.url + "/admin/routing/explain", json=chat_body(model="m-spilling"), headers=ADMIN, timeout=10
        ).json()
        assert admitting.metric("kvgate_admission_queue_depth", cluster="busy") == 0
    admission = answer["admission"]
    assert admission["action"] == "spill" and admission["cluster"] == "spare"
    assert admission["reason"] == "spill_saturated" and admission["primary"]["cluster"] == "busy"
    _settled(admitting)


def test_nothing_can_take_it_sheds_a_503_with_retry_after(admitting: RunningGateway) -> None:
    client = _client(admitting)
    with Holder(admitting), pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(model="m-strict", messages=[{"role": "user", "content": "hi"}])
    error = caught.value
    assert error.status_code == 503
    assert int(error.response.headers["retry-after"]) >= 1
    precise = int(error.response.headers["retry-after-ms"])  # the predicted drain, which the SDK reads first
    assert 1 <= precise <= int(error.response.headers["retry-after"]) * 1000
    payload = error.response.json()["error"]
    assert payload["type"] == "server_error" and payload["code"] == "engine_overloaded"
    assert admitting.metric("kvgate_admission_decisions_total", cluster="busy", action="shed", reason="shed_capacity") >= 1
    _settled(admitting)


def test_x_failover_route_false_also_disables_spill(admitting: RunningGateway) -> None:
    client = _client(admitting)
    with Holder(admitting), pytest.raises(openai.InternalServerError) as caught:
        client.chat.completions.create(
            model="m-spilling", messages=[{"role": "user", "content": "hi"}],
            extra_headers={"X-Failover-Route": "false"},
        )
    assert caught.value.status_code == 503 and caught.value.response.headers["retry-after"]
    _settled(admitting)


def test_a_queued_client_that_leaves_is_removed_at_once(admitting: RunningGateway) -> None:
    with Holder(admitting):
        body = chat_body(model="m-patient")
        with pytest.raises(httpx.TimeoutException):
            httpx.post(admitting.url + CHAT, json=body, timeout=0.4)
        # removed while the holder still has the slot (it ends about 2 s after it started)
        assert wait_until(lambda: admitting.metric("kvgate_admission_queue_depth", cluster="busy") == 0, timeout_s=1.0)
        assert admitting.endpoint("busy-0").in_flight == 1
    _settled(admitting)
    # the slot the leaver never got was not handed to nobody: the next request is served at once
    raw = _client(admitting).chat.completions.with_raw_response.create(
        model="m-patient", messages=[{"role": "user", "content": "hi"}]
    )
    assert raw.parse().choices[0].message.content == "echo from a"
    _settled(admitting)


def test_admission_off_is_todays_behaviour(plain: RunningGateway) -> None:
    client = _client(plain)
    with Holder(plain):
        raw = client.chat.completions.with_raw_response.create(
            model="m-strict", messages=[{"role": "user", "content": "hi"}]
        )
        assert raw.headers["x-kvgate-route"] == "strict; reason=route"
    assert raw.parse().choices[0].message.content == "echo from a"
    assert "kvgate_admission_" not in plain.metrics_text()
    answer = httpx.post(plain.url + "/admin/routing/explain", json=chat_body(model="m-strict"), headers=ADMIN, timeout=10).json()
    assert answer["admission"] is None
