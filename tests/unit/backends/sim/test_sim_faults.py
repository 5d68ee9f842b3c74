"""Fault specs and the injector: parsing, defaults, probability, counts, worker-wide kinds."""

from __future__ import annotations

import random

import pytest

from backends.sim.faults import Fault, FaultInjector, FaultSpecError, parse_fault


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("error", Fault("error")),
        ("error:status=503,message=overloaded", Fault("error", status=503, message="overloaded")),
        ("rate-limit:retry_after=2.5", Fault("rate-limit", retry_after=2.5)),
        ("hang-before-headers", Fault("hang-before-headers")),
        ("hang-after:tokens=3,seconds=1", Fault("hang-after", tokens=3, seconds=1.0)),
        ("drop-after", Fault("drop-after", tokens=1)),
        ("slow-first-token", Fault("slow-first-token", seconds=2.0)),
        ("stream-error:tokens=0", Fault("stream-error", tokens=0)),
        ("malformed-sse:tokens=2", Fault("malformed-sse", tokens=2)),
        ("stuck", Fault("stuck")),
        ("unhealthy:p=0.5,count=2", Fault("unhealthy", p=0.5, count=2)),
    ],
)
def test_parse(spec: str, expected: Fault) -> None:
    fault = parse_fault(spec)
    assert fault == expected
    assert parse_fault(fault.spec) == fault


@pytest.mark.parametrize("spec", ["boom", "error:status", "error:status=abc", "error:colour=red"])
def test_parse_rejects(spec: str) -> None:
    with pytest.raises(FaultSpecError):
        parse_fault(spec)


def test_header_fault_wins_and_always_fires() -> None:
    injector = FaultInjector(random.Random(0))
    injector.add(parse_fault("error:p=0"))
    assert injector.pick("rate-limit").kind == "rate-limit"
    assert injector.pick(None) is None


def test_count_uses_a_rule_up() -> None:
    injector = FaultInjector(random.Random(0))
    injector.add(parse_fault("error:status=502,count=2"))
    picked = [injector.pick(None) for _ in range(3)]
    assert [f.status if f else None for f in picked] == [502, 502, None]
    assert injector.rules == ()


def test_probability_is_seeded() -> None:
    def draws(seed: int) -> list[bool]:
        injector = FaultInjector(random.Random(seed))
        injector.add(parse_fault("error:p=0.3"))
        return [injector.pick(None) is not None for _ in range(200)]

    assert draws(7) == draws(7)
    assert 30 < sum(draws(7)) < 90


def test_worker_wide_kinds_are_state_not_request_faults() -> None:
    injector = FaultInjector(random.Random(0))
    injector.add(parse_fault("stuck"))
    assert injector.active("stuck") and not injector.active("unhealthy")
    assert injector.pick(None) is None
    injector.clear()
    assert not injector.active("stuck")
