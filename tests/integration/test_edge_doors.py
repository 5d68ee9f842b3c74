"""Both doors call the one edge, whatever ``server.access_log`` and tracing say (issue 18).

Four gateways over real loopback sockets: the raw protocol door (``KvgateHttpProtocol``, as
``kvgate serve``) and the ASGI door (uvicorn's httptools protocol with the same limits, the app's
``GatewayApp.__call__``), each with the access log and tracing off, then on. A spy on
:meth:`gateway.api.edge.Edge.serve` records which door handed each inference request to the
edge: all four must, with the door their fixture says, and every request exactly once. With the
switches on, the access-log line and the server span (with a client span per attempt) are
written on both doors; with them off, neither is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from gateway.api.edge import Edge
from gateway.api.openai import AsgiDoor
from gateway.api.server import InferenceCycle
from tests.integration.conftest import NEVER_EJECT
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway, chat_body
from tests.support.threads import wait_until

CHAT = "/v1/chat/completions"
DOORS = {"raw": InferenceCycle, "asgi": AsgiDoor}
CASES = [("raw", False), ("raw", True), ("asgi", False), ("asgi", True)]


@pytest.fixture(scope="module", params=CASES, ids=[f"{door}-door-log-{'on' if on else 'off'}" for door, on in CASES])
def served(request: pytest.FixtureRequest, fake_a: FakeUpstream) -> Iterator[tuple[RunningGateway, bool, InMemorySpanExporter]]:
    """(gateway, whether the access log and tracing are on, its span exporter)."""
    door, observed = request.param
    exporter = InMemorySpanExporter()  # one per provider: a provider's shutdown stops its exporter
    provider = None
    if observed:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    data = {
        "server": {"access_log": observed},
        **NEVER_EJECT,
        "clusters": {"fast": {"endpoints": [{"name": "edge-a", "url": fake_a.base_url, "model": "qwen-served"}]}},
        "models": {"qwen-fast": {"cluster": "fast"}},
    }
    gateway = RunningGateway(data, door=door, tracer_provider=provider, health_checks=False).start()
    yield gateway, observed, exporter
    gateway.stop()
    if provider is not None:
        provider.shutdown()


@pytest.fixture
def edge_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[type, str]]:
    """(door class, path) of every request handed to ``Edge.serve`` during the test."""
    calls: list[tuple[type, str]] = []
    original = Edge.serve

    def spy(self: Edge, door: Any, operation: Any) -> Any:
        calls.append((type(door), door.scope["path"]))
        return original(self, door, operation)

    monkeypatch.setattr(Edge, "serve", spy)
    return calls


def _lines(caplog: pytest.LogCaptureFixture, request_id: str) -> list[dict[str, Any]]:
    return [r.fields for r in caplog.records if r.name == "kvgate.access" and getattr(r, "fields", {}).get("request_id") == request_id]


@pytest.mark.parametrize("stream", [False, True], ids=["buffered", "stream"])
def test_every_door_calls_the_edge_and_writes_the_same_log_and_span(
    served: tuple[RunningGateway, bool, InMemorySpanExporter], edge_calls: list[tuple[type, str]],
    http: httpx.Client, caplog: pytest.LogCaptureFixture, stream: bool,
) -> None:
    gateway, observed, exporter = served
    caplog.set_level(logging.INFO, logger="kvgate.access")
    request_id = f"edge-{gateway.door}-{observed}-{stream}"
    body = chat_body(stream=True, stream_options={"include_usage": True}) if stream else chat_body()
    response = http.post(gateway.url + CHAT, json=body, headers={"X-Request-Id": request_id})
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"] == request_id
    assert response.headers["x-kvgate-endpoint"] == "edge-a"
    assert http.get(gateway.url + "/health").status_code == 200  # the line of the request above is written by now
    assert edge_calls == [(DOORS[gateway.door], CHAT)], "the request did not go through the edge by its door"
    if not observed:
        assert _lines(caplog, request_id) == []
        assert not [s for s in exporter.get_finished_spans() if s.attributes.get("kvgate.request_id") == request_id]
        return
    assert wait_until(lambda: len(_lines(caplog, request_id)) == 1)
    (line,) = _lines(caplog, request_id)
    assert line["status"] == 200 and line["method"] == "POST" and line["path"] == CHAT
    assert line["model"] == "qwen-fast" and line["endpoint"] == "edge-a" and line["outcome"] == "success"
    assert line["output_tokens"] == 3
    assert wait_until(lambda: any(s.attributes.get("kvgate.request_id") == request_id for s in exporter.get_finished_spans()))
    spans = exporter.get_finished_spans()
    server = next(s for s in spans if s.kind is SpanKind.SERVER and s.attributes.get("kvgate.request_id") == request_id)
    assert server.name == "POST /v1/chat/completions"
    assert server.attributes["http.response.status_code"] == 200
    assert server.attributes["kvgate.endpoint"] == "edge-a"
    clients = [s for s in spans if s.parent is not None and s.parent.span_id == server.context.span_id]
    assert [c.kind for c in clients] == [SpanKind.CLIENT]


def test_an_error_is_logged_and_traced_on_every_door(
    served: tuple[RunningGateway, bool, InMemorySpanExporter], edge_calls: list[tuple[type, str]],
    http: httpx.Client, caplog: pytest.LogCaptureFixture,
) -> None:
    """A request refused before the director made an exchange (unknown model) still gets its line and span."""
    gateway, observed, exporter = served
    caplog.set_level(logging.INFO, logger="kvgate.access")
    request_id = f"edge-error-{gateway.door}-{observed}"
    response = http.post(gateway.url + CHAT, json=chat_body(model="nope"), headers={"X-Request-Id": request_id})
    assert response.status_code == 404 and response.json()["error"]["code"] == "model_not_found"
    assert response.headers["x-request-id"] == request_id
    assert http.get(gateway.url + "/health").status_code == 200
    assert edge_calls == [(DOORS[gateway.door], CHAT)]
    if not observed:
        assert _lines(caplog, request_id) == []
        return
    assert wait_until(lambda: len(_lines(caplog, request_id)) == 1)
    assert _lines(caplog, request_id)[0]["status"] == 404
    assert wait_until(lambda: any(s.attributes.get("kvgate.request_id") == request_id for s in exporter.get_finished_spans()))
