import pytest

from gateway.endpoints.circuit import BreakerPolicy, CircuitBreaker, CircuitState


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make(**policy: float) -> tuple[CircuitBreaker, Clock]:
    clock = Clock()
    return CircuitBreaker(BreakerPolicy(**policy), clock), clock  # type: ignore[arg-type]


def test_consecutive_failures_open_then_cooldown_then_one_probe() -> None:
    breaker, clock = make(consecutive_failures=3, cooldown_s=5)
    for _ in range(2):
        breaker.record_failure()
    assert breaker.state is CircuitState.CLOSED and breaker.allow()
    breaker.record_failure()
    assert breaker.state is CircuitState.OPEN
    assert not breaker.allow() and breaker.retry_at == 105.0
    clock.now = 105.0
    assert breaker.available()
    assert breaker.allow()  # the probe
    assert not breaker.allow() and not breaker.available()  # only one at a time
    breaker.record_success()
    assert breaker.state is CircuitState.CLOSED and breaker.allow()


def test_failed_probe_doubles_the_cooldown_up_to_the_cap() -> None:
    breaker, clock = make(consecutive_failures=1, cooldown_s=4, max_cooldown_s=10)
    breaker.record_failure()
    expected = [8.0, 10.0, 10.0]
    for cooldown in expected:
        clock.now = breaker.retry_at
        assert breaker.allow()
        breaker.record_failure()
        assert breaker.state is CircuitState.OPEN
        assert breaker.retry_at - clock.now == cooldown


def test_released_probe_can_be_retaken() -> None:
    breaker, clock = make(consecutive_failures=1, cooldown_s=1)
    breaker.record_failure()
    clock.now += 1
    assert breaker.allow()
    breaker.release_probe()  # the client left or sent a bad request: no verdict
    assert breaker.allow()


@pytest.mark.parametrize(
    "outcomes, opens",
    [
        ([True, False] * 10, True),  # 50% of 20
        ([True, True, False] * 7, False),  # 33%
        ([False, True] * 4, False),  # 50% but under min_requests
    ],
)
def test_failure_ratio_in_window(outcomes: list[bool], opens: bool) -> None:
    breaker, clock = make(consecutive_failures=100, failure_ratio=0.5, min_requests=10, window_s=30)
    for ok in outcomes:
        clock.now += 0.5
        breaker.record_success() if ok else breaker.record_failure()
    assert (breaker.state is CircuitState.OPEN) is opens


def test_old_outcomes_leave_the_window() -> None:
    breaker, clock = make(consecutive_failures=100, failure_ratio=0.5, min_requests=4, window_s=10)
    breaker.record_success()
    breaker.record_failure()
    breaker.record_failure()
    clock.now += 20
    breaker.record_failure()  # with the old three still counted this would be 3 of 4
    assert breaker.state is CircuitState.CLOSED
