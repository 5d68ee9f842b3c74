"""Admin stats from a metrics registry, and the JSON log formatter."""

from __future__ import annotations

import logging
import sys

import orjson
import pytest

from gateway.observability.logging import JsonFormatter, configure_logging
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.stats import compute_stats, quantile_bound


@pytest.mark.parametrize(
    ("buckets", "q", "bound"),
    [
        ([], 0.5, None),
        ([(0.1, 0.0), (float("inf"), 0.0)], 0.5, None),
        ([(0.1, 5.0), (1.0, 10.0), (float("inf"), 10.0)], 0.5, 0.1),
        ([(0.1, 5.0), (1.0, 10.0), (float("inf"), 10.0)], 0.95, 1.0),
        ([(0.1, 1.0), (float("inf"), 10.0)], 0.95, None),
    ],
)
def test_quantile_bound(buckets: list[tuple[float, float]], q: float, bound: float | None) -> None:
    assert quantile_bound(buckets, q) == bound


def test_stats_per_model_cluster_and_endpoint() -> None:
    m = GatewayMetrics()
    m.requests.labels("qwen", "fast", "a", "success").inc(3)
    m.requests.labels("qwen", "fast", "b", "upstream_error").inc(1)
    m.requests.labels("r1", "", "", "client_error").inc(2)
    m.tokens.labels("qwen", "fast", "prompt").inc(70)
    m.tokens.labels("qwen", "fast", "cached").inc(40)
    m.tokens.labels("qwen", "fast", "completion").inc(30)
    m.cost.labels("qwen", "fast").inc(0.25)
    for seconds in (0.05, 0.2, 0.3):
        m.request_duration.labels("qwen", "fast").observe(seconds)
        m.endpoint_duration.labels("a").observe(seconds)
    stats = compute_stats(m.registry.collect())
    qwen = stats["models"]["qwen"]
    assert (qwen["requests"], qwen["errors"], qwen["input_tokens"], qwen["cached_tokens"], qwen["output_tokens"]) == (4, 1, 70, 40, 30)
    assert qwen["cost_usd"] == 0.25
    assert qwen["latency"] == {"count": 3, "mean_s": pytest.approx(0.55 / 3, abs=1e-6), "p50_le_s": 0.25, "p95_le_s": 0.5}
    assert stats["models"]["r1"]["errors"] == 2 and "" not in stats["clusters"]
    assert stats["endpoints"]["a"]["requests"] == 3 and stats["endpoints"]["b"]["errors"] == 1
    assert stats["endpoints"]["a"]["latency"]["count"] == 3 and stats["endpoints"]["b"]["latency"]["count"] == 0


def test_endpoint_rows_take_tokens_and_cost_from_the_endpoint_counters_and_every_row_counts_cancels() -> None:
    m = GatewayMetrics()
    m.requests.labels("qwen", "fast", "a", "success").inc(2)
    m.requests.labels("qwen", "fast", "a", "cancelled").inc(1)
    m.requests.labels("qwen", "fast", "b", "cancelled").inc(2)
    m.requests.labels("qwen", "fast", "", "cancelled").inc(1)  # left before an endpoint was chosen
    m.tokens.labels("qwen", "fast", "prompt").inc(90)
    m.cost.labels("qwen", "fast").inc(0.5)
    for endpoint, prompt, cached, completion, cost in (("a", 60, 20, 12, 0.375), ("b", 30, 0, 2, 0.125)):
        m.endpoint_tokens.labels(endpoint, "prompt").inc(prompt)
        m.endpoint_tokens.labels(endpoint, "cached").inc(cached)
        m.endpoint_tokens.labels(endpoint, "completion").inc(completion)
        m.endpoint_cost.labels(endpoint).inc(cost)
    stats = compute_stats(m.registry.collect())
    a, b = stats["endpoints"]["a"], stats["endpoints"]["b"]
    assert (a["requests"], a["errors"], a["cancelled"], a["input_tokens"], a["cached_tokens"], a["output_tokens"]) == (3, 0, 1, 60, 20, 12)
    assert (b["requests"], b["cancelled"], b["input_tokens"], b["cached_tokens"], b["output_tokens"]) == (2, 2, 30, 0, 2)
    assert (a["cost_usd"], b["cost_usd"]) == (0.375, 0.125)
    qwen = stats["models"]["qwen"]  # the endpoint counters never add to the model and cluster rows
    assert (qwen["requests"], qwen["cancelled"], qwen["input_tokens"], qwen["cost_usd"]) == (6, 4, 90, 0.5)
    assert stats["clusters"]["fast"]["cancelled"] == 4 and set(stats["endpoints"]) == {"a", "b"}


def test_json_formatter_merges_fields_and_exceptions() -> None:
    record = logging.LogRecord("kvgate.access", logging.INFO, __file__, 1, "POST %s", ("/v1/x",), None)
    record.fields = {"request_id": "r-1", "status": 200}
    entry = orjson.loads(JsonFormatter().format(record))
    assert entry["message"] == "POST /v1/x" and entry["request_id"] == "r-1" and entry["level"] == "info"
    assert entry["ts"].endswith("+00:00") and entry["logger"] == "kvgate.access"
    try:
        raise ValueError("boom")
    except ValueError:
        failed = logging.LogRecord("kvgate", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    assert "ValueError: boom" in orjson.loads(JsonFormatter().format(failed))["exc_info"]


def test_configure_logging_installs_one_handler() -> None:
    root = logging.getLogger("kvgate-test-root")
    configure_logging("json", "warning", root=root)
    configure_logging("text", "debug", root=root)
    assert len(root.handlers) == 1 and root.level == logging.DEBUG
    assert not isinstance(root.handlers[0].formatter, JsonFormatter)


def test_repeat_filter_lets_one_line_per_window_through_and_counts_the_rest() -> None:
    from gateway.observability.logging import RepeatFilter

    now = [100.0]
    logger = logging.getLogger("kvgate.test.repeat")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    handler.addFilter(RepeatFilter(window_s=10.0, clock=lambda: now[0]))
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        for index in range(5):
            logger.warning("store down: %s", f"error {index}")
        logger.info("info lines always pass")
        logger.warning("another template")
        now[0] += 10.0
        logger.warning("store down: %s", "error 5")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    messages = [record.getMessage() for record in records]
    assert messages == [
        "store down: error 0",
        "info lines always pass",
        "another template",
        "store down: error 5 (4 similar suppressed in the last 10 s)",
    ]
    assert records[-1].fields == {"suppressed": 4}


def test_the_text_format_keeps_an_access_lines_fields() -> None:
    from gateway.observability.logging import TextFormatter

    record = logging.LogRecord("kvgate.access", logging.INFO, __file__, 1, "POST %s %d", ("/v1/chat/completions", 200), None)
    record.fields = {"request_id": "r1", "model": "qwen-fast", "route": "fast; reason=model", "cluster": None,
                     "input_tokens": 7}
    line = TextFormatter().format(record)
    assert line.endswith('POST /v1/chat/completions 200 request_id=r1 model=qwen-fast route="fast; reason=model" input_tokens=7')
