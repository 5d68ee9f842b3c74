import pytest

from gateway.endpoints.circuit import BreakerPolicy, CircuitState
from gateway.endpoints.model import Endpoint, EndpointSpec, Health


def make(unhealthy: int = 2, healthy: int = 1) -> Endpoint:
    return Endpoint(EndpointSpec("e", "c", "http://h:8000/v1", "m"), unhealthy_threshold=unhealthy, healthy_threshold=healthy)


def test_starts_unknown_and_routable() -> None:
    endpoint = make()
    assert endpoint.health is Health.UNKNOWN and endpoint.routable


def test_request_failures_open_the_breaker_not_the_health_state() -> None:
    endpoint = Endpoint(EndpointSpec("e", "c", "http://h/v1", "m"), breaker=BreakerPolicy(consecutive_failures=2), clock=lambda: 0.0)
    endpoint.record_failure("x")
    endpoint.record_success()
    endpoint.record_failure("y")
    assert endpoint.routable
    endpoint.record_failure("z")
    assert endpoint.circuit is CircuitState.OPEN and not endpoint.routable
    assert endpoint.health is Health.HEALTHY  # the success in between; checks alone eject
    assert endpoint.last_error == "z"


def test_failed_checks_eject() -> None:
    endpoint = make(unhealthy=2)
    endpoint.record_check(False, "down")
    assert endpoint.routable
    endpoint.record_check(False, "down")
    assert endpoint.health is Health.UNHEALTHY and not endpoint.routable


def test_checks_readmit_after_threshold() -> None:
    endpoint = make(unhealthy=1, healthy=2)
    endpoint.record_check(False, "down")
    assert endpoint.health is Health.UNHEALTHY
    endpoint.record_check(True)
    assert endpoint.health is Health.UNHEALTHY
    endpoint.record_check(True)
    assert endpoint.health is Health.HEALTHY


@pytest.mark.parametrize(
    "base_url, health_url, expected",
    [
        ("http://h:8000/v1", None, "http://h:8000/health"),
        ("https://api.example.com/v1", None, "https://api.example.com/health"),
        ("http://h:8000/v1", "http://h:8000/ping", "http://h:8000/ping"),
    ],
)
def test_health_url(base_url: str, health_url: str | None, expected: str) -> None:
    assert EndpointSpec("e", "c", base_url, "m", health_url=health_url).effective_health_url() == expected


def test_in_flight_acquire_release() -> None:
    endpoint = make()
    endpoint.acquire()
    endpoint.acquire()
    endpoint.release()
    assert endpoint.in_flight == 1


def test_rate_limit_cooldown_is_no_failure_and_ends_by_itself() -> None:
    now = [100.0]
    endpoint = Endpoint(EndpointSpec("e", "c", "http://h/v1", "m"), breaker=BreakerPolicy(consecutive_failures=1), clock=lambda: now[0])
    endpoint.cool_down(30.0)
    assert endpoint.cooling_until == 130.0 and not endpoint.routable
    assert endpoint.circuit is CircuitState.CLOSED
    endpoint.cool_down(5.0)  # a shorter Retry-After never shortens a cooldown under way
    assert endpoint.cooling_until == 130.0
    now[0] = 130.0
    assert endpoint.cooling_until == 0.0 and endpoint.routable
    endpoint.cool_down(0.0)
    assert endpoint.routable


def _routable_long_form(endpoint: Endpoint) -> bool:
    """``Endpoint.routable`` as it read before its shortcuts (issue 23): every check called."""
    return (
        endpoint.health is not Health.UNHEALTHY and not endpoint.stalled and not endpoint.draining
        and not endpoint.cooling_until and endpoint.breaker.available()
    )


@pytest.mark.parametrize("health", list(Health))
@pytest.mark.parametrize("stalled", [False, True])
@pytest.mark.parametrize("draining", [False, True])
@pytest.mark.parametrize("cool_s", [0.0, 5.0])
@pytest.mark.parametrize("failures", [0, 2])
@pytest.mark.parametrize("later_s", [0.0, 6.0, 60.0])
@pytest.mark.parametrize("probe", [False, True])
def test_routable_shortcuts_agree_with_every_check(
    health: Health, stalled: bool, draining: bool, cool_s: float, failures: int, later_s: float, probe: bool
) -> None:
    """The closed-breaker and no-cooldown shortcuts give the long form's answer, and leave the same state."""
    now = [0.0]
    pairs = []
    for _ in range(2):
        endpoint = Endpoint(
            EndpointSpec("e", "c", "http://h/v1", "m"), breaker=BreakerPolicy(consecutive_failures=2, cooldown_s=10.0),
            clock=lambda: now[0],
        )
        endpoint.health, endpoint.stalled, endpoint.draining = health, stalled, draining
        endpoint.cool_down(cool_s)
        for _ in range(failures):
            endpoint.record_failure("x")
        pairs.append(endpoint)
    now[0] = later_s
    fast, slow = pairs
    if probe:  # a half-open breaker whose one probe is out
        fast.breaker.allow()
        slow.breaker.allow()
    assert fast.routable == _routable_long_form(slow)
    assert (fast.circuit, fast.cooling_until) == (slow.circuit, slow.cooling_until)
