"""The admission decision: admit, queue, spill or shed (table tests), and priority resolution."""

from __future__ import annotations

import math

import orjson
import pytest

from gateway.admission.decision import Action, Decision, SpillTarget, decide, resolve_priority, retry_after
from gateway.admission.saturation import Saturation
from gateway.config.admission import AdmissionKeySettings


def sat(wait: float, *, saturated: bool | None = None, drain: float = 3.2, cluster: str = "fast",
        routable: int = 2, measured: bool = True) -> Saturation:
    return Saturation(cluster, wait, drain, wait > 5.0 if saturated is None else saturated, measured, routable)


MANAGED = SpillTarget(sat(0.0, cluster="managed", measured=False), price_usd=0.02)


@pytest.mark.parametrize(
    ("primary", "kwargs", "action", "cluster", "reason"),
    [
        (sat(0.0), {}, Action.ADMIT, "fast", "free"),
        (sat(math.inf, routable=0), {}, Action.ADMIT, "fast", "free"),  # failover's business
        (sat(2.0), {}, Action.QUEUE, "fast", "queued"),
        (sat(2.0), {"spill": [MANAGED]}, Action.QUEUE, "fast", "queued"),  # within the limit: no spill
        (sat(9.0, saturated=False), {}, Action.QUEUE, "fast", "queued"),  # an engine says it has room
        (sat(9.0), {"spill": [MANAGED]}, Action.SPILL, "managed", "spill_saturated"),
        (sat(9.0), {"spill": [MANAGED], "allow_spill": False}, Action.SHED, "fast", "shed_capacity"),
        (sat(9.0), {"spill": [MANAGED], "budget_left_usd": 0.01}, Action.SHED, "fast", "shed_capacity"),
        (sat(9.0), {"spill": [MANAGED], "budget_left_usd": 0.05}, Action.SPILL, "managed", "spill_saturated"),
        (sat(9.0), {"spill": [SpillTarget(sat(9.5, cluster="slow"))]}, Action.SHED, "fast", "shed_capacity"),
        (sat(9.0), {"spill": [SpillTarget(sat(6.0, cluster="slow", saturated=False))]}, Action.SHED, "fast",
         "shed_capacity"),  # sooner, but over the limit
        (sat(9.0), {"spill": [SpillTarget(sat(0.0, cluster="gone", routable=0)), MANAGED]}, Action.SPILL,
         "managed", "spill_saturated"),
        (sat(2.0), {"queue_room": "capacity", "spill": [MANAGED]}, Action.SPILL, "managed", "spill_saturated"),
        (sat(2.0), {"queue_room": "capacity"}, Action.SHED, "fast", "shed_capacity"),
        (sat(2.0), {"queue_room": "key_limit"}, Action.SHED, "fast", "shed_key_limit"),
        (sat(9.0), {}, Action.SHED, "fast", "shed_capacity"),
    ],
)
def test_decide(primary: Saturation, kwargs: dict, action: Action, cluster: str, reason: str) -> None:
    decision = decide(primary, limit_s=5.0, **kwargs)
    assert (decision.action, decision.cluster, decision.reason) == (action, cluster, reason)
    assert decision.wait_s == primary.wait_s


def test_queue_ttl_is_the_limit_and_admit_wakes_the_waiters_that_fit() -> None:
    assert decide(sat(2.0), limit_s=5.0).ttl_s == 5.0
    assert decide(sat(0.0), limit_s=5.0, queued=3).wake == 3


@pytest.mark.parametrize(("drain", "seconds"), [(0.0, 1), (0.2, 1), (1.0, 1), (3.2, 4), (math.inf, 1)])
def test_retry_after(drain: float, seconds: int) -> None:
    assert retry_after(drain) == seconds


def test_shed_errors_have_openai_shape_and_retry_after() -> None:
    capacity = decide(sat(9.0), limit_s=5.0).error()
    assert (capacity.status, capacity.code, capacity.headers["Retry-After"]) == (503, "engine_overloaded", "4")
    body = orjson.loads(capacity.body())["error"]
    assert body["type"] == "server_error" and "saturated" in body["message"]
    limited = decide(sat(2.0), limit_s=5.0, queue_room="key_limit")
    assert limited.status == 429
    error = limited.error()
    assert (error.status, error.code, orjson.loads(error.body())["error"]["type"]) == (
        429, "rate_limit_exceeded", "rate_limit_error")


def test_error_of_a_decision_that_was_not_shed_is_a_bug() -> None:
    decision = Decision(Action.ADMIT, "fast", "free", 0.0)
    assert decision.status is None
    with pytest.raises(ValueError):
        decision.error()


@pytest.mark.parametrize(
    ("key", "header", "priority"),
    [
        (AdmissionKeySettings(), None, 0),
        (AdmissionKeySettings(), "batch", 1),  # lowering is always allowed
        (AdmissionKeySettings(priority="batch"), "interactive", 1),  # raising is not ...
        (AdmissionKeySettings(priority="batch", allow_priority_header=True), "Interactive", 0),  # ... unless allowed
        (AdmissionKeySettings(), "urgent", 0),  # unknown values are ignored
    ],
)
def test_resolve_priority(key: AdmissionKeySettings, header: str | None, priority: int) -> None:
    assert resolve_priority(key, header) == priority
