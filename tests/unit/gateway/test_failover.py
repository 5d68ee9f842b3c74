import pytest

from gateway.errors import InvalidRequestError
from gateway.failover import CLIENT_ERROR, RELAY, RETRY, apply_failover_header, classify, retry_after_s
from gateway.selection.route import Route

PRIMARY = Route("chat", ("reasoning", "fast", "openai"))
ROUTES = {
    "reasoning": Route("reasoning", ("reasoning",)),
    "fast": Route("fast", ("fast",)),
    "openai": Route("openai", ("openai",)),
    "cheap": Route("cheap", ("fast", "openai")),
}


@pytest.mark.parametrize(
    "header, clusters, failover, reason",
    [
        (None, ("reasoning", "fast", "openai"), True, "model"),
        ("true", ("fast", "openai"), True, "header:true"),
        (" TRUE ", ("fast", "openai"), True, "header:true"),
        ("false", ("reasoning",), False, "header:false"),
        ("cheap", ("fast", "openai"), True, "header:route"),
        ("openai", ("openai",), True, "header:route"),
    ],
)
def test_header_values(header: str | None, clusters: tuple[str, ...], failover: bool, reason: str) -> None:
    route = apply_failover_header(header, PRIMARY, ROUTES)
    assert (route.clusters, route.failover, route.reason) == (clusters, failover, reason)


@pytest.mark.parametrize("header", ["yes", "", "1", "Cheap", "x" * 500])
def test_other_values_are_400(header: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        apply_failover_header(header, PRIMARY, ROUTES)
    assert caught.value.status == 400 and caught.value.param == "X-Failover-Route"


def test_true_without_a_chain_is_400() -> None:
    with pytest.raises(InvalidRequestError):
        apply_failover_header("true", ROUTES["fast"], ROUTES)


@pytest.mark.parametrize(
    "status, retryable, client",
    [(400, False, True), (401, False, True), (404, False, True), (408, True, False), (422, False, True),
     (429, True, False), (500, True, False), (502, True, False), (503, True, False)],
)
def test_status_classes(status: int, retryable: bool, client: bool) -> None:
    assert (classify(status, 0) is RETRY) is retryable
    assert (classify(status, 0) is CLIENT_ERROR) is client


@pytest.mark.parametrize(
    "outcome, sent, verdict",
    [(200, 0, RELAY), (302, 0, RETRY), (404, 10, CLIENT_ERROR), (503, 0, RETRY), (503, 10, RELAY),
     (ConnectionError(), 0, RETRY), (TimeoutError(), 5, RELAY)],
)
def test_classify_the_one_outcome_rule(outcome: object, sent: int, verdict: object) -> None:
    assert classify(outcome, sent) is verdict  # type: ignore[arg-type]


@pytest.mark.parametrize("value, expected", [(None, 0.0), ("", 0.0), ("3", 2.0), ("1.5", 1.5), ("-4", 0.0), ("Wed, 21 Oct 2015", 0.0)])
def test_retry_after_is_capped(value: str | None, expected: float) -> None:
    assert retry_after_s(value, cap_s=2.0) == expected


def test_rate_limit_headers_keep_retry_after_and_every_x_ratelimit() -> None:
    from gateway.failover import rate_limit_headers

    headers = {"Retry-After": "3", "X-RateLimit-Remaining-Requests": "0", "x-ratelimit-reset-tokens": "6ms",
               "content-type": "application/json", "set-cookie": "s=1", "x-request-id": "r"}
    assert rate_limit_headers(headers) == {
        "retry-after": "3", "x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-tokens": "6ms",
    }
