"""Request-head and idle-connection limits (issue 17, item 3), over raw sockets.

Short limits (``[server]``) keep these to seconds. Each case runs through both doors: the raw
inference door (``api/server.py``) and the ASGI app (``RunningGateway(door="asgi")``, with the access log on). Every
answer past a limit is OpenAI-shaped JSON with ``connection: close``, and the gateway closes.
No test asserts a duration: each waits for the gateway's answer with a generous socket timeout.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway, read_until, sse_data
from tests.support.security_edge import read_all, slow_socket

LIMITS = {"max_header_bytes": 4096, "max_headers": 20, "header_timeout_s": 0.6, "body_timeout_s": 0.6, "keepalive_s": 0.6}
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: kvgate\r\nContent-Type: application/json\r\n"


@pytest.fixture(scope="module")
def slow_fake() -> Iterator[FakeUpstream]:
    fake = FakeUpstream("slow", script="slow_stream").start()  # ten chunks 0.2 s apart: longer than every limit
    yield fake
    fake.stop()


@pytest.fixture(scope="module", params=["raw-door", "asgi-door"])
def limited(request: pytest.FixtureRequest, slow_fake: FakeUpstream) -> Iterator[RunningGateway]:
    data: dict[str, Any] = {
        "server": {**LIMITS, "access_log": request.param == "asgi-door"},
        "health": {"interval_s": 60},
        "clusters": {"pool": {"endpoints": [{"name": "slow", "url": slow_fake.base_url, "model": "m"}]}},
        "models": {"m": {"cluster": "pool"}},
    }
    gateway = RunningGateway(data, door="raw" if request.param == "raw-door" else "asgi", health_checks=False).start()
    assert gateway.door == ("raw" if request.param == "raw-door" else "asgi")
    yield gateway
    gateway.stop()


def _status_and_error(raw: bytes) -> tuple[int, dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower(), head
    return int(head.split(b" ", 2)[1]), orjson.loads(body)["error"]


def _closed(sock: socket.socket) -> bool:
    """True if the gateway has closed the connection (a read sees the end, or a write is reset)."""
    try:
        sock.sendall(b"x" * 65536)
        sock.sendall(b"x" * 65536)
        return sock.recv(1) == b""
    except TimeoutError:
        return False  # still open
    except OSError:
        return True


def test_a_head_over_max_header_bytes_gets_431(limited: RunningGateway) -> None:
    with slow_socket(limited.port, HEAD + b"X-Big: " + b"a" * 5000 + b"\r\nContent-Length: 2\r\n\r\n{}") as sock:
        status, error = _status_and_error(read_all(sock))
    assert status == 431 and error["code"] == "request_header_fields_too_large"


def test_an_unfinished_head_is_cut_at_max_header_bytes(limited: RunningGateway) -> None:
    with slow_socket(limited.port, HEAD + b"X-Endless: ") as sock:
        for _ in range(8):  # 8 KiB of one header value that never ends, well before the header timeout
            try:
                sock.sendall(b"a" * 1024)
            except OSError:
                break
        status, error = _status_and_error(read_all(sock))
    assert status == 431, error


def test_more_than_max_headers_gets_431(limited: RunningGateway) -> None:
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(25))
    with slow_socket(limited.port, HEAD + many + b"Content-Length: 2\r\n\r\n{}") as sock:
        status, error = _status_and_error(read_all(sock))
    assert status == 431 and "100" not in error["message"] and "20" in error["message"]


def test_headers_trickling_in_get_408(limited: RunningGateway) -> None:
    with slow_socket(limited.port, b"POST /v1/chat/completions HTTP/1.1\r\n") as sock:
        answer = b""
        for _ in range(100):  # one byte every 0.05 s: each read is quick, the head never completes in time
            try:
                sock.sendall(b"X")
            except OSError:
                break
            time.sleep(0.05)
            sock.setblocking(False)
            try:
                answer += sock.recv(65536)
            except BlockingIOError:
                pass
            finally:
                sock.settimeout(10.0)
            if answer:
                break
        answer += read_all(sock)
    status, error = _status_and_error(answer)
    assert status == 408 and error["code"] == "request_timeout"


def test_a_connection_that_sends_nothing_is_closed(limited: RunningGateway) -> None:
    with slow_socket(limited.port) as sock:
        assert read_all(sock) == b""  # closed without an answer (no request to answer)
        assert _closed(sock)


def test_an_unfinished_body_gets_408(limited: RunningGateway) -> None:
    with slow_socket(limited.port, HEAD + b"Content-Length: 100\r\n\r\n{\"model\"") as sock:
        status, error = _status_and_error(read_all(sock))
    assert status == 408 and error["code"] == "request_timeout"


def test_an_idle_keep_alive_connection_is_closed(limited: RunningGateway) -> None:
    # 4 s of patience: well past server.keepalive_s (0.6 s here), short of uvicorn's own 5 s
    with slow_socket(limited.port, b"GET /health HTTP/1.1\r\nHost: kvgate\r\n\r\n", timeout_s=4.0) as sock:
        answer = read_all(sock)  # the answer, then the close
        assert answer.startswith(b"HTTP/1.1 200")
        assert _closed(sock)


def test_a_steady_slow_body_and_a_long_stream_are_never_cut(limited: RunningGateway) -> None:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 200}], "stream": True})
    pieces = [body[i : i + 40] for i in range(0, len(body), 40)]
    with slow_socket(limited.port, HEAD + b"Content-Length: %d\r\n\r\n" % len(body)) as sock:
        for piece in pieces:  # every gap (0.2 s) shorter than body_timeout_s, the whole upload longer
            time.sleep(0.2)
            sock.sendall(piece)
        answer = read_until(sock, b"data: [DONE]")
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    events = sse_data(answer.partition(b"\r\n\r\n")[2].replace(b"\r\n", b"\n"))
    assert events and events[-1] == "[DONE]"


def test_a_long_stream_through_the_sdk_shape_is_whole(limited: RunningGateway) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.stream("POST", limited.base_url + "/chat/completions", json=body, timeout=30) as response:
        text = b"".join(response.iter_bytes())
    assert response.status_code == 200
    assert sse_data(text)[-1] == "[DONE]"


def test_a_body_left_unfinished_after_the_answer_is_closed(limited: RunningGateway) -> None:
    """The app answered without reading the body; the client sends one more byte, then nothing."""
    head = b"POST /v1/models HTTP/1.1\r\nHost: kvgate\r\nContent-Length: 1000\r\n\r\n0123456789"
    with slow_socket(limited.port, head, timeout_s=4.0) as sock:
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
        assert answer.startswith(b"HTTP/1.1 405")
        time.sleep(0.1)
        sock.sendall(b"x")  # data resets uvicorn's keep-alive timer; only the body timer is left
        read_all(sock)
        assert _closed(sock)
