"""gateway/closeout.py: every end-of-request effect once, the cost priced once, the access-log line."""

from __future__ import annotations

import logging
import types
from typing import Any

import pytest

from gateway.closeout import CloseOut, access_fields, access_line
from gateway.exchange import CANCELLED, SUCCESS, UPSTREAM_ERROR
from gateway.keys.pricing import Price
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.request_log import RequestLog

PRICE = Price(input_per_mtok=1.0, cached_input_per_mtok=0.5, output_per_mtok=2.0)
USAGE = {"prompt_tokens": 1000, "completion_tokens": 500, "prompt_tokens_details": {"cached_tokens": 200}}
COST = (800 * 1.0 + 200 * 0.5 + 500 * 2.0) / 1e6


class CountingPricing:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def get(self, cluster: str) -> Price:
        self.asked.append(cluster)
        return PRICE


class Gate:
    def __init__(self) -> None:
        self.settled: list[tuple[Any, ...]] = []

    def settle(self, admission: Any, model: str, cluster: str, ok: bool, tokens: Any, cost: float, *, charge_estimate: bool) -> None:
        self.settled.append((model, cluster, ok, tokens, cost, charge_estimate))


class Selector:
    def __init__(self) -> None:
        self.finished: list[tuple[Any, float]] = []

    def finished_(self, exchange: Any, cost: float) -> None:
        self.finished.append((exchange, cost))


class Trace:
    def __init__(self) -> None:
        self.exchange: Any = None
        self.ended: list[tuple[Any, Any, float]] = []

    def finish(self, exchange: Any, tokens: Any, cost: float) -> None:
        self.ended.append((exchange, tokens, cost))


def make(clock: list[float]) -> tuple[CloseOut, CountingPricing, Gate, Selector, RequestLog, GatewayMetrics]:
    metrics, pricing, gate, selector = GatewayMetrics(), CountingPricing(), Gate(), Selector()
    log = RequestLog(10, wall_clock=lambda: 0.0)
    observer = types.SimpleNamespace(finished=selector.finished_)
    closeout = CloseOut(metrics, pricing, gate, log, clock=lambda: clock[0], selector=observer)  # type: ignore[arg-type]
    return closeout, pricing, gate, selector, log, metrics


def test_one_close_does_every_effect_once_with_the_cost_priced_once() -> None:
    clock = [10.0]
    closeout, pricing, gate, selector, log, metrics = make(clock)
    state = types.SimpleNamespace(request_id="r1", trace=Trace())
    admission = types.SimpleNamespace(key=types.SimpleNamespace(name="team", id="k1"))
    exchange = closeout.open("r1", "m", admission, state)  # type: ignore[arg-type]
    assert state.exchange is exchange and exchange.trace is state.trace and state.trace.exchange is exchange
    exchange.selection = types.SimpleNamespace(selection=types.SimpleNamespace(reason="light"))
    exchange.route, exchange.cluster, exchange.endpoint, exchange.attempts = "r", "c", "e", 2
    clock[0] = 12.0
    exchange.finish(SUCCESS, usage=USAGE, first_token_at=10.5)
    exchange.finish(UPSTREAM_ERROR)  # ignored: closed once
    assert pricing.asked == ["c"], "the cost is priced once per request"
    assert [cost for _, cost in selector.finished] == [pytest.approx(COST)]
    assert gate.settled == [("m", "c", True, exchange.tokens, pytest.approx(COST), False)]
    assert state.trace.ended == [(exchange, exchange.tokens, pytest.approx(COST))]
    record = log.recent(1)[0]
    assert record["cost_usd"] == pytest.approx(COST, abs=1e-9) and record["attempts"] == 2 and record["key"] == "team"
    assert record["e2e_s"] == 2.0 and record["ttft_s"] == 0.5 and record["outcome"] == "success"
    registry = metrics.registry
    assert registry.get_sample_value("kvgate_requests_total", {"model": "m", "cluster": "c", "endpoint": "e", "outcome": "success"}) == 1
    assert registry.get_sample_value("kvgate_cost_usd_total", {"model": "m", "cluster": "c"}) == pytest.approx(COST)
    assert registry.get_sample_value("kvgate_retries_total", {"model": "m", "cluster": "c"}) == 1
    assert registry.get_sample_value("kvgate_endpoint_cost_usd_total", {"endpoint": "e"}) == pytest.approx(COST)
    by_kind = {kind: registry.get_sample_value("kvgate_endpoint_tokens_total", {"endpoint": "e", "kind": kind})
               for kind in ("prompt", "cached", "completion")}
    assert by_kind == {"prompt": 1000, "cached": 200, "completion": 500}


def test_a_request_without_an_endpoint_adds_nothing_to_the_endpoint_counters() -> None:
    closeout, _, _, _, _, metrics = make([0.0])
    exchange = closeout.open("r3", "m", None, types.SimpleNamespace())
    exchange.cluster = "c"  # a cluster and usage, but no endpoint
    exchange.finish(CANCELLED, usage=USAGE)
    registry = metrics.registry
    assert registry.get_sample_value("kvgate_tokens_total", {"model": "m", "cluster": "c", "kind": "prompt"}) == 1000
    assert registry.get_sample_value("kvgate_cost_usd_total", {"model": "m", "cluster": "c"}) == pytest.approx(COST)
    assert registry.get_sample_value("kvgate_endpoint_tokens_total", {"endpoint": "", "kind": "prompt"}) is None
    assert registry.get_sample_value("kvgate_endpoint_cost_usd_total", {"endpoint": ""}) is None


def test_a_cancel_without_usage_keeps_the_reservation_as_its_charge() -> None:
    clock = [0.0]
    closeout, pricing, gate, selector, log, _ = make(clock)
    exchange = closeout.open("r2", "m", types.SimpleNamespace(key=types.SimpleNamespace(name="t", id="k")), types.SimpleNamespace())  # type: ignore[arg-type]
    exchange.cluster, exchange.attempts = "c", 1
    exchange.finish(CANCELLED)
    assert pricing.asked == [] and selector.finished == []  # no tokens: nothing priced; no selection: no load observed
    assert gate.settled == [("m", "c", False, None, 0.0, True)]
    assert log.recent(1)[0]["status"] == 499


def test_the_access_line_names_where_the_request_went(caplog: pytest.LogCaptureFixture) -> None:
    clock = [0.0]
    closeout, *_ = make(clock)
    exchange = closeout.open("r3", "m", types.SimpleNamespace(key=types.SimpleNamespace(name="t", id="k9")), types.SimpleNamespace())  # type: ignore[arg-type]
    exchange.route, exchange.cluster, exchange.endpoint, exchange.attempts = "r", "c", "e", 1
    exchange.finish(SUCCESS, usage=USAGE)
    caplog.set_level(logging.INFO, logger="kvgate.access")
    access_line(exchange, request_id="r3", method="POST", path="/v1/chat/completions", status=200, duration_s=0.0123,
                extra={"request_body": "{}"})
    (line,) = [r for r in caplog.records if r.name == "kvgate.access"]
    assert line.getMessage() == "POST /v1/chat/completions 200"
    fields = line.fields  # type: ignore[attr-defined]
    assert fields["duration_ms"] == 12.3 and fields["key_id"] == "k9" and fields["endpoint"] == "e"
    assert (fields["input_tokens"], fields["cached_tokens"], fields["output_tokens"]) == (1000, 200, 500)
    assert fields["outcome"] == "success" and fields["request_body"] == "{}"
    bare = access_fields(None, request_id="r4", method="POST", path="/v1/completions", status=401, duration_s=0.0)
    assert bare == {"request_id": "r4", "method": "POST", "path": "/v1/completions", "status": 401, "duration_ms": 0.0}
