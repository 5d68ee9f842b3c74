"""gateway/attempt.py: an attempt holds the slot and the probe, and is ended exactly once."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.attempt import Attempt, BufferedReply, Retry
from gateway.endpoints.circuit import CircuitState
from gateway.endpoints.model import Endpoint, EndpointSpec
from gateway.errors import UpstreamError
from gateway.exchange import Exchange
from gateway.observability.metrics import GatewayMetrics


class Decision:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def commit(self, endpoint: Endpoint) -> None:
        self.calls.append(("commit", endpoint.name))

    def observe(self, endpoint: Endpoint, usage: Any) -> None:
        self.calls.append(("observe", usage))


def half_open() -> tuple[Endpoint, list[float]]:
    """An endpoint whose breaker opened and cooled down: its next request is the one probe."""
    now = [0.0]
    endpoint = Endpoint(EndpointSpec("e", "c", "http://e/v1", "m"), clock=lambda: now[0])
    for _ in range(10):
        endpoint.record_failure("boom")
    now[0] = 1000.0
    assert endpoint.breaker.allow() and endpoint.circuit is CircuitState.HALF_OPEN
    return endpoint, now


def gauge(metrics: GatewayMetrics) -> float:
    return metrics.registry.get_sample_value("kvgate_endpoint_in_flight", {"endpoint": "e"}) or 0.0


ENDINGS = [
    ("succeeded", lambda a: a.succeeded({"total_tokens": 1}), CircuitState.CLOSED, True),
    ("failed", lambda a: a.failed("timeout", "slow"), CircuitState.OPEN, False),
    ("cooled", lambda a: a.cooled(5.0, "http_429", "busy"), CircuitState.HALF_OPEN, True),
    ("abandoned", lambda a: a.abandoned(), CircuitState.HALF_OPEN, True),
    ("retried-cool", lambda a: a.retried(Retry(UpstreamError("x"), "http_429", cool_s=3.0)), CircuitState.HALF_OPEN, True),
    ("retried-fail", lambda a: a.retried(Retry(UpstreamError("x"), "http_503")), CircuitState.OPEN, False),
]


@pytest.mark.parametrize(("name", "end", "state", "probe_free"), ENDINGS, ids=[e[0] for e in ENDINGS])
def test_every_ending_frees_the_slot_once_and_settles_the_probe(name: str, end: Any, state: CircuitState, probe_free: bool) -> None:
    endpoint, _ = half_open()
    metrics, decision = GatewayMetrics(), Decision()
    attempt = Attempt(endpoint, decision, metrics)  # type: ignore[arg-type]
    assert endpoint.in_flight == 1 and gauge(metrics) == 1 and not attempt.ended
    end(attempt)
    for again in ENDINGS:  # whatever ends it later changes nothing
        again[1](attempt)
    assert attempt.ended and endpoint.in_flight == 0 and gauge(metrics) == 0
    assert endpoint.circuit is state
    if state is CircuitState.HALF_OPEN:
        assert endpoint.breaker.available() is probe_free, "the half-open probe was kept"
    assert decision.calls == ([("observe", {"total_tokens": 1})] if name == "succeeded" else [])


def test_a_buffered_reply_settles_its_attempt_and_exchange_once() -> None:
    endpoint = Endpoint(EndpointSpec("e", "c", "http://e/v1", "m"))
    metrics, decision = GatewayMetrics(), Decision()
    exchange = Exchange("r", "m", lambda: 0.0)
    body = b'{"choices": [], "usage": {"prompt_tokens": 2, "completion_tokens": 1}}'
    reply = BufferedReply(200, body, "application/json", Attempt(endpoint, decision, metrics), exchange)  # type: ignore[arg-type]
    assert endpoint.in_flight == 1
    reply.settle()
    reply.settle()
    assert endpoint.in_flight == 0 and exchange.outcome == "success"
    assert decision.calls == [("commit", "e"), ("observe", {"prompt_tokens": 2, "completion_tokens": 1})]
    assert exchange.tokens is not None and exchange.tokens.output == 1
