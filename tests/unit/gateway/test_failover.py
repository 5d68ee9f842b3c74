import pytest

from gateway.errors import InvalidRequestError
from gateway.failover import Route, apply_failover_header, is_client_error, is_retryable_status, retry_after_s

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
    assert is_retryable_status(status) is retryable
    assert is_client_error(status) is client


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
