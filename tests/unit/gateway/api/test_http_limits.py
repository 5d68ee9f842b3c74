"""The body-rate rules of ``gateway/api/http_limits.py`` on a fake clock: no sockets, no sleeping.

:class:`LimitedHttpProtocol` is driven directly (``data_received`` and its one timer) on a fake
loop whose clock the test moves, so the time the gateway holds a body back (flow control, ``100
Continue`` not yet sent) can be shown not to count against the client, deterministically. The
real-socket cases (408 on a trickle, a cap, pipelining) are in ``tests/security/test_http_limits.py``.
"""

from __future__ import annotations

import math
import types
from typing import Any

import orjson
import pytest
import uvicorn
from uvicorn.server import ServerState

from gateway.api.http_limits import HttpLimits, LimitedHttpProtocol, _TimedFlow

HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: kvgate\r\nContent-Length: 100000\r\n"


class Timer:
    def __init__(self, when: float, callback: Any) -> None:
        self.when, self.callback, self.cancelled = when, callback, False

    def cancel(self) -> None:
        self.cancelled = True


class Task:
    def add_done_callback(self, _: Any) -> None:
        pass


class FakeLoop:
    """The three things the protocol asks of its loop: the time, a timer, a task (never run)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.timers: list[Timer] = []

    def time(self) -> float:
        return self.now

    def call_later(self, delay: float, callback: Any) -> Timer:
        timer = Timer(self.now + delay, callback)
        self.timers.append(timer)
        return timer

    def create_task(self, coro: Any, **_: Any) -> Any:
        coro.close()
        return Task()

    def fire(self, at: float) -> None:
        """Move the clock to ``at`` and run the armed timer (wherever it was due: a check may come early)."""
        self.now = at
        armed = [timer for timer in self.timers if not timer.cancelled]
        self.timers = []
        assert len(armed) == 1, armed  # one timer per connection, never one per read
        armed[0].callback()


class FakeTransport:
    def __init__(self) -> None:
        self.written, self.closed, self.paused = b"", False, False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 5000) if name in ("sockname", "peername") else default

    def is_closing(self) -> bool:
        return self.closed

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


async def _app(scope: Any, receive: Any, send: Any) -> None:  # never run: the fake loop drops tasks
    raise AssertionError("not reached")


def _protocol(**server: Any) -> tuple[LimitedHttpProtocol, FakeLoop, FakeTransport]:
    limits = {"max_header_bytes": 61440, "max_headers": 100, "header_timeout_s": 60.0, "body_timeout_s": 60.0,
              "body_min_rate": 1000, "body_grace_s": 1.0, "body_max_s": 0.0, **server}
    _app.state = types.SimpleNamespace(  # type: ignore[attr-defined]
        container=types.SimpleNamespace(settings=types.SimpleNamespace(server=types.SimpleNamespace(**limits)))
    )
    loop, transport = FakeLoop(), FakeTransport()
    protocol = LimitedHttpProtocol(uvicorn.Config(_app, lifespan="off"), ServerState(), {}, _loop=loop)  # type: ignore[arg-type]
    protocol.connection_made(transport)  # type: ignore[arg-type]
    return protocol, loop, transport


def _answer(transport: FakeTransport) -> tuple[int, str]:
    head, _, body = transport.written.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), orjson.loads(body)["error"]["message"]


def test_body_left_applies_the_grace_the_rate_and_the_cap() -> None:
    limits = HttpLimits(body_min_rate=500, body_grace_s=20.0, body_max_s=0.0)
    assert limits.body_left(5.0, 0) == (15.0, "body_min_rate")  # in its grace: checked at its end
    assert limits.body_left(30.0, 20_000) == (10.0, "body_min_rate")  # 20 kB buy 40 s at 500 B/s
    assert limits.body_left(50.0, 20_000)[0] < 0  # 400 B/s on average: broken
    assert HttpLimits(body_min_rate=0, body_max_s=0.0).body_left(1e6, 0) == (math.inf, "")
    capped = HttpLimits(body_min_rate=500, body_grace_s=20.0, body_max_s=30.0)
    assert capped.body_left(25.0, 10**9) == (5.0, "body_max_s")
    assert capped.first_body_check_s == 20.0 and HttpLimits(body_min_rate=0).first_body_check_s == 60.0


def test_timed_flow_sums_the_holds_exactly() -> None:
    loop, transport = FakeLoop(), FakeTransport()
    flow = _TimedFlow(transport, loop)  # type: ignore[arg-type]
    flow.restart(loop.now, held=True)  # 100 Continue not sent yet
    loop.now += 3.0
    flow.resume_reading()  # the first receive: 100 Continue, then reading resumes (it was never paused)
    assert flow.held_s == 3.0 and flow.held_at is None and not transport.paused
    flow.pause_reading()
    loop.now += 2.0
    flow.pause_reading()  # already paused: the hold keeps its start
    loop.now += 2.0
    flow.resume_reading()
    assert flow.held_s == 7.0 and not transport.paused
    flow.resume_reading()  # nothing held: nothing changes
    assert flow.held_s == 7.0


def test_a_fast_body_arms_no_body_timer() -> None:
    protocol, loop, transport = _protocol()
    protocol.data_received(b"POST /v1/chat/completions HTTP/1.1\r\nHost: kvgate\r\nContent-Length: 2\r\n\r\n{}")
    assert protocol.cycle is not None and not protocol.cycle.more_body and not transport.written
    assert protocol._timer is None and not [t for t in loop.timers if not t.cancelled]


def test_a_trickle_is_answered_408_naming_body_min_rate() -> None:
    protocol, loop, transport = _protocol()
    protocol.data_received(HEAD + b"\r\n" + b"x" * 100)
    loop.fire(1000.5)  # early (clock resolution): in its grace still, armed again
    assert not transport.written
    loop.fire(1001.0)  # 1 s, 100 bytes: 100 B/s
    status, message = _answer(transport)
    assert status == 408 and "server.body_min_rate" in message and transport.closed


@pytest.mark.parametrize("hold", ["paused", "100-continue"])
def test_time_the_gateway_holds_the_body_does_not_count(hold: str) -> None:
    protocol, loop, transport = _protocol()
    expect = b"Expect: 100-continue\r\n" if hold == "100-continue" else b""
    protocol.data_received(HEAD + expect + b"\r\n" + b"x" * 100)
    if hold == "paused":
        protocol.flow.pause_reading()  # as uvicorn does past 64 KiB unread
    loop.fire(1030.0)  # 30 s held: neither the grace nor the rate has run
    assert not transport.written
    if hold == "100-continue":
        protocol.cycle.waiting_for_100_continue = False  # the app's first receive sent it ...
    protocol.flow.resume_reading()  # ... and resumed reading
    loop.now = 1030.5
    protocol.data_received(b"x" * 1900)  # 2000 bytes in 0.5 s of the client's time
    loop.fire(1030.5)
    assert not transport.written  # in its grace (1 s) on the client's clock
    loop.fire(1031.9)  # 1.9 s of the client's: 2000 bytes buy 2 s at 1000 B/s
    assert not transport.written
    loop.fire(1032.1)
    status, message = _answer(transport)
    assert status == 408 and "server.body_min_rate" in message


def test_body_max_s_caps_a_fast_body_and_0_rate_is_off() -> None:
    protocol, loop, transport = _protocol(body_min_rate=0, body_max_s=5.0)
    protocol.data_received(HEAD + b"\r\n" + b"x" * 10)
    loop.fire(1001.0)  # early: armed again (no rate rule: nothing else was due)
    loop.fire(1005.0)
    status, message = _answer(transport)
    assert status == 408 and "server.body_max_s" in message
