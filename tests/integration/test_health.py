"""Liveness, readiness and the Prometheus endpoint."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.gateway import RunningGateway, chat_body, error_shape_ok
from tests.support.threads import wait_until


def test_health_is_ok(gateway: RunningGateway, http: httpx.Client) -> None:
    response = http.get(gateway.url + "/health")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_ready_is_503_when_the_only_endpoint_is_down(dead_gateway: RunningGateway, http: httpx.Client) -> None:
    # Wait until health checks ran (the gauge is set by each check) and ejected the endpoint.
    assert wait_until(lambda: "kvgate_endpoint_healthy{" in dead_gateway.metrics_text())
    assert wait_until(lambda: dead_gateway.endpoint("dead-only").health.value == "unhealthy")
    assert dead_gateway.metric("kvgate_endpoint_healthy", endpoint="dead-only") == 0
    response = http.get(dead_gateway.url + "/ready")
    assert response.status_code == 503
    payload = response.json()
    assert error_shape_ok(payload), payload
    assert payload["error"]["code"] == "no_healthy_endpoint"
    assert payload["error"]["type"] == "server_error"
    assert response.headers.get("x-request-id")
    assert http.get(dead_gateway.url + "/health").status_code == 200  # alive, just not ready


def test_ready_is_200_when_one_endpoint_is_up(gateway: RunningGateway, http: httpx.Client) -> None:
    # cluster "dead" never answers; "fast" and "reasoning" do.
    assert wait_until(lambda: http.get(gateway.url + "/ready").status_code == 200)
    payload = http.get(gateway.url + "/ready").json()
    assert payload["status"] == "ready"
    assert payload["healthy_endpoints"] >= 1
    assert wait_until(lambda: gateway.metric("kvgate_endpoint_healthy", endpoint="reason-a") == 1)


def test_metrics_is_prometheus_text(gateway: RunningGateway, http: httpx.Client) -> None:
    assert http.post(gateway.url + "/v1/chat/completions", json=chat_body()).status_code == 200
    response = http.get(gateway.url + "/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    assert "# TYPE kvgate_requests_total counter" in text
    families = {family.name: family for family in text_string_to_metric_families(text)}
    assert {"kvgate_requests", "kvgate_upstream_failures", "kvgate_endpoint_in_flight", "kvgate_endpoint_healthy"} <= set(families)
    samples = [s for s in families["kvgate_requests"].samples if s.name == "kvgate_requests_total"]
    assert any(
        s.labels == {"model": "qwen-fast", "cluster": "fast", "endpoint": "fast-a", "outcome": "success"} and s.value >= 1
        for s in samples
    )
