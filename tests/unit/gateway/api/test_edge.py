"""The edge (``gateway/api/edge.py``) in-process: a fake door, a fake director, no sockets.

Each test drives :meth:`Edge.serve` through a :class:`FakeDoor` that records what was read and
written, with both kinds of door writes (at once, as the raw door; awaited, as the ASGI door).
"""

from __future__ import annotations

import asyncio
import logging
import types
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.api.edge import INTERNAL_ERROR, Edge
from gateway.errors import AuthenticationError, RateLimitError
from gateway.observability.tracing import CURRENT
from gateway.protocol.openai import Operation
from gateway.proxy import BufferedReply
from gateway.relay import ClientDisconnected

KEY = object()


class FakeDoor:
    """A door whose client sends ``body`` (None: it leaves during the upload)."""

    def __init__(self, body: bytes | None = b"{}", headers: dict[str, str] | None = None, awaited: bool = False) -> None:
        raw = [(b"content-type", b"application/json"), *((k.encode(), v.encode()) for k, v in (headers or {}).items())]
        self.scope: dict[str, Any] = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": raw}
        self.body = body
        self.awaited = awaited
        self.disconnected = False
        self.started = False
        self.read = 0
        self.written: list[tuple[int, bytes, bytes, dict[bytes, bytes]]] = []
        self.events: list[str] = []
        self.closed = False

    async def read_body(self, limit: int) -> bytes | None:
        self.read += 1
        return self.body

    def watch(self, work: Any) -> Any:
        return work

    def write(self, status: int, content_type: bytes, body: bytes, extra: list[tuple[bytes, bytes]]) -> Any:
        if self.started:
            return None
        self.started = True
        self.written.append((status, content_type, body, dict(extra)))
        self.events.append("write")
        if self.awaited:
            return asyncio.sleep(0)
        return None

    def left(self) -> None:
        self.events.append("left")

    def close(self) -> bool:
        self.closed = True
        return True

    async def receive(self) -> Any:
        await asyncio.Event().wait()

    async def send(self, message: Any) -> None:
        self.started = True


class FakeGate:
    def __init__(self, error: Exception | None = None) -> None:
        self.error = error

    def authenticate(self, authorization: str | None) -> Any:
        if self.error is not None:
            raise self.error
        return KEY


def _container(handle: Any, gate: FakeGate | None = None, limit: int = 1024) -> Any:
    return types.SimpleNamespace(
        ops=types.SimpleNamespace(gate=gate or FakeGate()),
        settings=types.SimpleNamespace(server=types.SimpleNamespace(max_body_bytes=limit)),
        proxy=types.SimpleNamespace(handle=handle),
    )


class _SettleSpy:
    """Stands in for the reply's Attempt: records that the edge settled the reply."""

    def __init__(self, door: FakeDoor) -> None:
        self._door = door

    def succeeded(self, usage: Any, *, accepted: bool) -> None:
        self._door.events.append("settled")


def _reply(door: FakeDoor, status: int = 200, body: bytes = b'{"ok":1}') -> Any:
    async def handle(operation: Operation, headers: Any, raw: bytes, state: Any, watch: Any, key: Any) -> Any:
        handle.state = state  # type: ignore[attr-defined]
        reply = BufferedReply(status, body, "application/json", attempt=_SettleSpy(door))
        return reply, {"x-kvgate-endpoint": "e1"}

    return handle


def _serve(edge: Edge, door: FakeDoor) -> None:
    asyncio.run(_run(edge.serve(door, Operation.CHAT)))


async def _run(work: Any) -> None:
    await work


@pytest.mark.parametrize("awaited", [False, True], ids=["written-at-once", "awaited"])
def test_a_buffered_reply_is_written_with_the_request_id_then_settled(awaited: bool) -> None:
    door = FakeDoor(headers={"x-request-id": "client-1"}, awaited=awaited)
    handle = _reply(door)
    _serve(Edge(_container(handle)), door)
    ((status, content_type, body, extra),) = door.written
    assert (status, content_type, body) == (200, b"application/json", b'{"ok":1}')
    assert extra == {b"x-kvgate-endpoint": b"e1", b"x-request-id": b"client-1"}
    assert door.events == ["write", "settled"]
    assert handle.state.request_id == "client-1"  # type: ignore[attr-defined]


def test_an_insane_request_id_is_replaced_by_a_new_one() -> None:
    door = FakeDoor(headers={"x-request-id": "has space"})
    _serve(Edge(_container(_reply(door))), door)
    sent = door.written[0][3][b"x-request-id"]
    assert len(sent) == 32 and sent != b"has space"


def test_a_401_comes_before_the_body_is_read() -> None:
    door = FakeDoor()
    _serve(Edge(_container(_reply(door), FakeGate(AuthenticationError("no key")))), door)
    assert door.read == 0
    status, _, body, extra = door.written[0]
    assert status == 401 and orjson.loads(body)["error"]["message"] == "no key"
    assert b"x-request-id" in extra


def test_a_declared_body_over_the_limit_is_413_unread() -> None:
    door = FakeDoor(headers={"content-length": "2048"})
    _serve(Edge(_container(_reply(door), limit=1024)), door)
    assert door.read == 0
    assert door.written[0][0] == 413


def test_a_gateway_error_keeps_its_headers() -> None:
    door = FakeDoor()

    async def handle(*args: Any) -> Any:
        raise RateLimitError("slow down", headers={"Retry-After": "7"})

    _serve(Edge(_container(handle)), door)
    status, content_type, body, extra = door.written[0]
    assert status == 429 and content_type == b"application/json"
    assert extra[b"retry-after"] == b"7"
    error = orjson.loads(body)["error"]
    assert (error["type"], error["code"], error["message"]) == ("rate_limit_error", "rate_limit_exceeded", "slow down")


def test_an_unexpected_error_is_logged_and_answered_with_the_one_internal_error(caplog: pytest.LogCaptureFixture) -> None:
    door = FakeDoor()

    async def handle(*args: Any) -> Any:
        raise RuntimeError("secret internals")

    _serve(Edge(_container(handle)), door)
    status, _, body, _ = door.written[0]
    error = orjson.loads(body)["error"]
    assert status == 500 and error["type"] == "server_error" and error["message"] == INTERNAL_ERROR
    assert "secret" not in body.decode()
    assert any("unhandled error" in record.getMessage() for record in caplog.records)


def test_an_error_after_the_answer_started_closes_the_connection() -> None:
    door = FakeDoor()

    class Broken:
        def __init__(self) -> None:
            self.headers: list[tuple[bytes, bytes]] = []

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            raise RuntimeError("mid-stream")

    async def handle(*args: Any) -> Any:
        return Broken(), {}

    _serve(Edge(_container(handle)), door)
    assert door.closed and door.written == []


@pytest.mark.parametrize("where", ["upload", "forwarding"])
def test_a_client_that_leaves_is_answered_nothing(where: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kvgate.access")
    door = FakeDoor(body=None if where == "upload" else b"{}")

    async def handle(*args: Any) -> Any:
        raise ClientDisconnected()

    _serve(Edge(_container(handle), access_log=True), door)
    assert door.written == [] and door.events == ["left"]
    (record,) = [r for r in caplog.records if r.name == "kvgate.access"]
    assert record.fields["status"] == 499  # type: ignore[attr-defined]


def test_a_cancel_after_the_client_left_is_quiet() -> None:
    door = FakeDoor()

    async def handle(*args: Any) -> Any:
        door.disconnected = True
        raise asyncio.CancelledError()

    _serve(Edge(_container(handle)), door)
    assert door.written == [] and not door.closed


def test_the_access_log_line_has_the_exchange_and_the_payloads(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kvgate.access")
    door = FakeDoor(body=b'{"model":"m"}', headers={"x-request-id": "log-1"})
    inner = _reply(door)

    async def handle(*args: Any) -> Any:
        reply = await inner(*args)
        exchange = types.SimpleNamespace(
            model="m", route="r", cluster="c", endpoint="e1", outcome="success", attempts=1, admission=None, tokens=None
        )
        args[3].exchange = exchange
        return reply

    _serve(Edge(_container(handle), access_log=True, log_payloads=True), door)
    (record,) = [r for r in caplog.records if r.name == "kvgate.access"]
    fields = record.fields  # type: ignore[attr-defined]
    assert fields["request_id"] == "log-1" and fields["status"] == 200 and fields["path"] == "/v1/chat/completions"
    assert fields["model"] == "m" and fields["endpoint"] == "e1" and fields["outcome"] == "success"
    assert fields["request_body"] == '{"model":"m"}' and fields["response_body"] == '{"ok":1}'


def test_no_line_and_no_trace_when_both_are_off(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="kvgate.access")
    door = FakeDoor()
    handle = _reply(door)
    _serve(Edge(_container(handle)), door)
    assert [r for r in caplog.records if r.name == "kvgate.access"] == []
    assert not hasattr(handle.state, "trace")  # type: ignore[attr-defined]


def test_the_edge_starts_and_ends_the_requests_trace() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    door = FakeDoor(headers={"x-request-id": "trace-1"})
    seen: dict[str, Any] = {}
    inner = _reply(door)

    async def handle(*args: Any) -> Any:
        seen["state"], seen["current"] = args[3].trace, CURRENT.get()
        return await inner(*args)

    _serve(Edge(_container(handle), tracer=provider.get_tracer("test")), door)
    assert seen["state"] is seen["current"] and seen["state"] is not None
    (span,) = exporter.get_finished_spans()
    assert span.name == "POST /v1/chat/completions"
    assert span.attributes["kvgate.request_id"] == "trace-1"
    assert span.attributes["http.response.status_code"] == 200
    provider.shutdown()


@pytest.mark.parametrize("door", ["raw", "asgi"])
def test_both_doors_have_every_member_of_the_door_protocol(door: str) -> None:
    from gateway.api.openai import AsgiDoor
    from gateway.api.server import InferenceCycle

    cls: type = InferenceCycle if door == "raw" else AsgiDoor
    for name in ("read_body", "watch", "write", "left", "close", "receive", "send"):
        assert callable(getattr(cls, name, None)) or name in getattr(cls, "__slots__", ()), name
    assert hasattr(cls, "started")
