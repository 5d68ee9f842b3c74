"""The per-request ring: bounded, newest first, plain values only, cancels as 499."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gateway.keys.pricing import TokenUsage
from gateway.observability.request_log import FIELDS, PlainDecision, RequestLog


def _exchange(request_id: str, **fields: Any) -> SimpleNamespace:
    base: dict[str, Any] = dict(
        request_id=request_id, model="m", route="r", cluster="c", endpoint="e0", attempts=1, continuations=0,
        started=10.0, first_token_at=None, ended_at=10.25, status=200, outcome="success", error_type=None,
        admission=SimpleNamespace(key=SimpleNamespace(name="team")), selection=None, decision=None,
    )
    base.update(fields)
    return SimpleNamespace(**base)


def test_the_ring_is_bounded_and_lists_newest_first() -> None:
    log = RequestLog(3, wall_clock=lambda: 1000.0)
    for i in range(5):
        log.add(_exchange(f"r{i}"), None, 0.0)
    assert len(log) == 3
    assert [r["id"] for r in log.recent(10)] == ["r4", "r3", "r2"]
    assert [r["id"] for r in log.recent(2)] == ["r4", "r3"]
    assert log.find("r0") is None and log.find("r3") is not None


@pytest.mark.parametrize(
    ("fields", "tokens", "expected"),
    [
        ({}, TokenUsage(100, 40, 7), {"prompt_tokens": 100, "cached_tokens": 40, "completion_tokens": 7, "status": 200,
                                       "ttft_s": None, "e2e_s": 0.25, "key": "team"}),
        ({"first_token_at": 10.05}, None, {"ttft_s": 0.05, "prompt_tokens": None}),
        ({"outcome": "cancelled"}, None, {"status": 499, "outcome": "cancelled"}),
        ({"outcome": "upstream_error", "status": 502, "error_type": "upstream_error"}, None,
         {"status": 502, "error": "upstream_error"}),
        ({"admission": None}, None, {"key": None}),
        ({"selection": SimpleNamespace(selection=SimpleNamespace(reason="light"))}, None, {"reason": "light"}),
    ],
)
def test_each_record_has_the_fields(fields: dict[str, Any], tokens: TokenUsage | None, expected: dict[str, Any]) -> None:
    log = RequestLog(10, wall_clock=lambda: 1234.5678)
    log.add(_exchange("x", **fields), tokens, 1.5e-6)
    record = log.recent(1)[0]
    assert tuple(record) == FIELDS
    assert record["at"] == 1234.568 and record["cost_usd"] == 1.5e-6
    for name, value in expected.items():
        assert record[name] == pytest.approx(value) if isinstance(value, float) else record[name] == value


def test_a_plain_decision_keeps_its_order_and_the_newest_of_a_repeated_id_wins() -> None:
    log = RequestLog(10, wall_clock=lambda: 0.0)
    ranked = [SimpleNamespace(spec=SimpleNamespace(name=n)) for n in ("b", "a")]
    log.add(_exchange("dup", endpoint="a"), None, 0.0)
    log.add(_exchange("dup", endpoint="b", decision=SimpleNamespace(ranked=ranked)), None, 0.0)
    record, decision, selection = log.find("dup")  # type: ignore[misc]
    assert record["endpoint"] == "b" and selection is None
    assert isinstance(decision, PlainDecision) and decision.render()["ranked"] == ["b", "a"]
    assert decision.render()["scored"] is False


def test_size_zero_keeps_nothing() -> None:
    log = RequestLog(0, wall_clock=lambda: 0.0)
    log.add(_exchange("x"), None, 0.0)
    assert len(log) == 0 and log.recent(5) == [] and log.find("x") is None


def test_the_ring_holds_neither_the_request_nor_the_exchange() -> None:
    import gc

    request = SimpleNamespace(raw=b"a prompt of many bytes")
    routed = SimpleNamespace(selection=SimpleNamespace(reason="model"), request=request)  # as routes.selector.Routed
    exchange = _exchange("x", selection=routed)
    log = RequestLog(10, wall_clock=lambda: 0.0)
    log.add(exchange, TokenUsage(1, 0, 1), 0.0)
    entry = log._ring[0]
    assert all(item is not exchange and item is not routed and item is not request for item in entry)
    assert request.raw not in gc.get_referents(*entry)
    assert log.recent(1)[0]["reason"] == "model" and log.find("x")[2] is routed.selection  # type: ignore[index]
