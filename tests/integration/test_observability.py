"""Spans, metrics and access logs captured in-process from a real kvgate over loopback.

The gateway gets its own TracerProvider with an InMemorySpanExporter (no global provider). Model
``hop`` routes to cluster ``bad`` (a refusing port) with failover to ``good``, so every request
makes two attempts: two client spans under one server span, the first failed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway.observability.logging import JsonFormatter
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RefusingPort, RunningGateway, chat_body
from tests.support.threads import wait_until

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
SECRET_PROMPT = "my-secret-prompt-text"


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture(scope="module")
def traced(fake_a: FakeUpstream, refusing: RefusingPort, exporter: InMemorySpanExporter) -> Iterator[RunningGateway]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    data = {
        "server": {"access_log": True},
        "health": {"interval_s": 60},
        "clusters": {
            "bad": {"endpoints": [{"name": "obs-bad", "url": refusing.base_url, "model": "m"}]},
            "good": {
                "endpoints": [{"name": "obs-good", "url": fake_a.base_url, "model": "served-m"}],
                "price": {"input_per_mtok": 1.0, "cached_input_per_mtok": 0.5, "output_per_mtok": 2.0},
            },
        },
        "models": {"hop": {"cluster": "bad", "failover": ["good"]}},
    }
    gateway = RunningGateway(data, tracer_provider=provider, health_checks=False).start()
    yield gateway
    gateway.stop()
    provider.shutdown()


def _trace(exporter: InMemorySpanExporter, request_id: str) -> tuple[ReadableSpan, list[ReadableSpan]]:
    spans = exporter.get_finished_spans()
    server = next(s for s in spans if s.kind is SpanKind.SERVER and s.attributes.get("kvgate.request_id") == request_id)
    assert server.context.trace_id == int(TRACE_ID, 16)
    clients = sorted((s for s in spans if s.parent is not None and s.parent.span_id == server.context.span_id), key=lambda s: s.start_time)
    return server, clients


def _post(gateway: RunningGateway, http: httpx.Client, request_id: str, **fields: Any) -> httpx.Response:
    headers = {"traceparent": TRACEPARENT, "x-request-id": request_id}
    body = chat_body(model="hop", **fields)
    body["messages"][0]["content"] = SECRET_PROMPT
    return http.post(gateway.base_url + "/chat/completions", headers=headers, json=body)


def test_a_server_span_and_one_client_span_per_attempt(traced: RunningGateway, exporter: InMemorySpanExporter, http: httpx.Client, fake_a: FakeUpstream) -> None:
    exporter.clear()
    response = _post(traced, http, "obs-1")
    assert response.status_code == 200
    assert wait_until(lambda: any(s.kind is SpanKind.SERVER for s in exporter.get_finished_spans()))
    server, clients = _trace(exporter, "obs-1")
    assert server.name == "POST /v1/chat/completions"
    attributes = server.attributes
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == "hop"
    assert attributes["gen_ai.usage.input_tokens"] == 7
    assert attributes["gen_ai.usage.output_tokens"] == 3
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 4
    assert attributes["kvgate.cluster"] == "good" and attributes["kvgate.endpoint"] == "obs-good"
    assert attributes["kvgate.attempts"] == 2
    assert attributes["kvgate.cost_usd"] == pytest.approx(11e-6)
    assert attributes["http.response.status_code"] == 200
    assert [c.kind for c in clients] == [SpanKind.CLIENT, SpanKind.CLIENT]
    first, second = clients
    assert first.attributes["kvgate.failover.hop"] == 0 and first.attributes["kvgate.endpoint"] == "obs-bad"
    assert first.status.status_code is StatusCode.ERROR
    assert second.attributes["kvgate.failover.hop"] == 1 and second.attributes["kvgate.cluster"] == "good"
    assert second.name == "chat served-m" and second.attributes["gen_ai.request.model"] == "served-m"
    assert second.attributes["gen_ai.provider.name"] == "openai_compatible"
    assert second.attributes["gen_ai.usage.output_tokens"] == 3
    assert second.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert second.status.status_code is not StatusCode.ERROR
    sent = fake_a.last["headers"]["traceparent"]
    assert sent.split("-")[1] == TRACE_ID and int(sent.split("-")[2], 16) == second.context.span_id
    for span in (server, *clients):
        assert SECRET_PROMPT not in str(dict(span.attributes))


def test_a_stream_keeps_its_spans_open_until_it_ends(traced: RunningGateway, exporter: InMemorySpanExporter, http: httpx.Client) -> None:
    exporter.clear()
    response = _post(traced, http, "obs-2", stream=True, stream_options={"include_usage": True})
    assert response.status_code == 200 and response.text.endswith("data: [DONE]\n\n")
    assert wait_until(lambda: any(s.kind is SpanKind.SERVER for s in exporter.get_finished_spans()))
    server, clients = _trace(exporter, "obs-2")
    assert server.attributes["gen_ai.usage.output_tokens"] == 3
    assert clients[-1].attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert clients[-1].end_time <= server.end_time


def test_operations_metrics_are_exported(traced: RunningGateway, http: httpx.Client) -> None:
    before = traced.metrics_text()
    assert _post(traced, http, "obs-3", stream=True, stream_options={"include_usage": True}).status_code == 200
    refused = _post(traced, http, "obs-4", fake="status:400")
    assert refused.status_code == 400

    def grew(name: str, **labels: str) -> float:
        return traced.metric(name, **labels) - _metric(before, name, **labels)

    assert grew("kvgate_cost_usd_total", model="hop", cluster="good") == pytest.approx(11e-6)
    assert grew("kvgate_time_per_output_token_seconds_count", model="hop", cluster="good") == 1
    assert grew("kvgate_retries_total", model="hop", cluster="good") == 2
    assert grew("kvgate_route_decisions_total", model="hop", cluster="good") == 2
    assert grew("kvgate_request_errors_total", model="hop", error_type="400") == 1
    assert grew("kvgate_endpoint_request_duration_seconds_count", endpoint="obs-good") == 1
    assert traced.metric("kvgate_endpoint_circuit_state", endpoint="obs-good", state="closed") == 1
    assert traced.metric("kvgate_endpoint_circuit_state", endpoint="obs-good", state="open") == 0


def _metric(text: str, name: str, **labels: str) -> float:
    from tests.support.gateway import metric

    return metric(text, name, **labels)


def test_access_log_is_json_with_the_request_id_and_no_prompt_or_key(
    traced: RunningGateway, http: httpx.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="kvgate.access")
    headers = {"x-request-id": "obs-log-1", "Authorization": "Bearer sk-not-logged-123456"}
    body = chat_body(model="hop")
    body["messages"][0]["content"] = SECRET_PROMPT
    assert http.post(traced.base_url + "/chat/completions", headers=headers, json=body).status_code == 200
    assert wait_until(lambda: any(getattr(r, "fields", {}).get("request_id") == "obs-log-1" for r in caplog.records))
    record = next(r for r in caplog.records if getattr(r, "fields", {}).get("request_id") == "obs-log-1")
    line = JsonFormatter().format(record)
    entry = orjson.loads(line)
    assert entry["request_id"] == "obs-log-1" and entry["status"] == 200 and entry["level"] == "info"
    assert entry["model"] == "hop" and entry["cluster"] == "good" and entry["endpoint"] == "obs-good"
    assert entry["input_tokens"] == 7 and entry["cached_tokens"] == 4 and entry["output_tokens"] == 3
    assert SECRET_PROMPT not in line and "sk-not-logged" not in line
