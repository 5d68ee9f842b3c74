"""The raw door's request body (``gateway/api/server.py``) on a fake loop: no sockets.

:class:`~gateway.api.server.KvgateHttpProtocol` appends an inference body's reads to its
:class:`~gateway.api.server.InferenceCycle` and pauses reading only past ``BODY_HIGH_WATER``
(uvicorn pauses at 64 KiB), :meth:`InferenceCycle.read_body` joins the reads once, and the
body-rate rules still count the bytes that came with the head. Real sockets: bodies in segments,
``100 Continue`` and the limits in ``tests/integration/test_server_protocol.py``.
"""

from __future__ import annotations

import asyncio
import types

import pytest
import uvicorn
from uvicorn.server import ServerState

from gateway.api.http_limits import LINGER_S
from gateway.api.openai import GatewayApp
from gateway.api.server import BODY_HIGH_WATER, InferenceCycle, KvgateHttpProtocol
from gateway.errors import PayloadTooLargeError
from tests.unit.gateway.api.test_http_limits import FakeLoop, FakeTransport

LIMITS = {"max_header_bytes": 61440, "max_headers": 100, "header_timeout_s": 60.0, "body_timeout_s": 60.0,
          "body_min_rate": 1000, "body_grace_s": 1.0, "body_max_s": 0.0}


class EofTransport(FakeTransport):
    def __init__(self) -> None:
        super().__init__()
        self.eof = False

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True


def _protocol(length: int) -> tuple[KvgateHttpProtocol, FakeLoop, EofTransport, bytes]:
    app = GatewayApp()
    app.edge = object()  # type: ignore[assignment]  # never reached: the fake loop drops the request's task
    app.state.container = types.SimpleNamespace(settings=types.SimpleNamespace(server=types.SimpleNamespace(**LIMITS)))
    loop, transport = FakeLoop(), EofTransport()
    protocol = KvgateHttpProtocol(uvicorn.Config(app, lifespan="off"), ServerState(), {}, _loop=loop)  # type: ignore[arg-type]
    protocol.connection_made(transport)  # type: ignore[arg-type]
    head = f"POST /v1/chat/completions HTTP/1.1\r\nHost: kvgate\r\nContent-Length: {length}\r\n\r\n".encode()
    return protocol, loop, transport, head


def test_an_inference_body_is_buffered_up_to_the_high_water_mark_without_pausing() -> None:
    size = BODY_HIGH_WATER + 300_000
    protocol, _, transport, head = _protocol(size)
    body = bytes(range(256)) * (size // 256) + b"z" * (size % 256)
    third = BODY_HIGH_WATER // 3
    reads = [body[:third], body[third : 2 * third], body[2 * third : BODY_HIGH_WATER], body[BODY_HIGH_WATER:]]
    protocol.data_received(head + reads[0])
    cycle = protocol.cycle
    assert isinstance(cycle, InferenceCycle)
    for read in reads[1:3]:
        protocol.data_received(read)
        assert not transport.paused  # uvicorn's own cycle pauses past 64 KiB
    assert cycle.buffered == BODY_HIGH_WATER and not cycle.body  # uvicorn's bytearray is not used
    protocol.data_received(reads[3])
    assert transport.paused and not cycle.more_body  # past the mark: paused (the body is complete here)
    assert asyncio.run(cycle.read_body(size)) == body
    with pytest.raises(PayloadTooLargeError):
        asyncio.run(cycle.read_body(size - 1))


def test_a_200_kb_prompt_is_read_without_a_pause() -> None:
    protocol, _, transport, head = _protocol(200_000)
    protocol.data_received(head + b"x" * 150_000)
    protocol.data_received(b"x" * 50_000)
    assert not transport.paused and asyncio.run(protocol.cycle.read_body(10**6)) == b"x" * 200_000


def test_the_body_that_came_with_the_head_counts_for_the_minimum_rate() -> None:
    protocol, loop, transport, head = _protocol(100_000)
    protocol.data_received(head + b"x" * 1900)  # 1,900 bytes at once: 1.9 s at 1,000 B/s
    loop.fire(1001.0)  # the grace (1 s) ends: the rate holds
    assert not transport.written
    loop.fire(1001.8)
    assert not transport.written
    loop.fire(1002.0)  # 1,900 bytes in 2 s: under 1,000 B/s
    assert b" 408 " in transport.written.split(b"\r\n", 1)[0] and b"server.body_min_rate" in transport.written


def test_another_request_keeps_uvicorns_cycle() -> None:
    protocol, _, transport, _ = _protocol(0)
    protocol.data_received(b"POST /admin/endpoints HTTP/1.1\r\nHost: kvgate\r\nContent-Length: 100000\r\n\r\n" + b"x" * 70_000)
    assert not isinstance(protocol.cycle, InferenceCycle) and bytes(protocol.cycle.body) == b"x" * 70_000
    assert transport.paused  # uvicorn's 64 KiB mark


def test_an_answer_before_the_body_was_read_lingers_then_closes() -> None:
    protocol, loop, transport, head = _protocol(10**6)
    protocol.data_received(head + b"x" * 1000)
    cycle = protocol.cycle
    assert isinstance(cycle, InferenceCycle) and cycle.more_body
    cycle.write(413, b"application/json", b'{"error": {}}', [])
    assert transport.written.startswith(b"HTTP/1.1 413 ") and b"connection: close" in transport.written
    assert transport.eof and not transport.closed  # the write side ends; the rest of the body may come
    written = transport.written
    protocol.data_received(b"x" * 100_000 + b"POST /v1/chat/completions HTTP/1.1\r\n\r\n")
    assert protocol.cycle is cycle and transport.written == written  # dropped unparsed: no request after it
    loop.fire(loop.now + LINGER_S)
    assert transport.closed
