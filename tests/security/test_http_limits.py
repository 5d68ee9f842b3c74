"""Request-head, body-rate and idle-connection limits (issue 17, item 3), over raw sockets.

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

LIMITS = {
    "max_header_bytes": 4096, "max_headers": 20, "header_timeout_s": 0.6, "body_timeout_s": 0.6, "keepalive_s": 0.6,
    "body_min_rate": 0, "body_grace_s": 0.1,  # the rate rule off (the `rated` gateways below turn it on)
}
# a minimum rate of 2000 bytes/s after 0.5 s and at most 2.5 s per body (silence still 0.6 s)
RATED = {"body_timeout_s": 0.6, "body_min_rate": 2000, "body_grace_s": 0.5, "body_max_s": 2.5}
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: kvgate\r\nContent-Type: application/json\r\n"


@pytest.fixture(scope="module")
def slow_fake() -> Iterator[FakeUpstream]:
    fake = FakeUpstream("slow", script="slow_stream").start()  # ten chunks 0.2 s apart: longer than every limit
    yield fake
    fake.stop()


def _gateway(door: str, server: dict[str, Any], fake: FakeUpstream) -> RunningGateway:
    data: dict[str, Any] = {
        "server": {**server, "access_log": door == "asgi-door"},
        "health": {"interval_s": 60},
        "clusters": {"pool": {"endpoints": [{"name": "slow", "url": fake.base_url, "model": "m"}]}},
        "models": {"m": {"cluster": "pool"}},
    }
    gateway = RunningGateway(data, door="raw" if door == "raw-door" else "asgi", health_checks=False).start()
    assert gateway.door == ("raw" if door == "raw-door" else "asgi")
    return gateway


@pytest.fixture(scope="module", params=["raw-door", "asgi-door"])
def limited(request: pytest.FixtureRequest, slow_fake: FakeUpstream) -> Iterator[RunningGateway]:
    gateway = _gateway(request.param, LIMITS, slow_fake)
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module", params=["raw-door", "asgi-door"])
def rated(request: pytest.FixtureRequest, slow_fake: FakeUpstream) -> Iterator[RunningGateway]:
    gateway = _gateway(request.param, RATED, slow_fake)
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


def _trickle(sock: socket.socket, piece: bytes, gap_s: float, times: int) -> bytes:
    """Send ``piece`` every ``gap_s`` seconds (at most ``times`` times) until the gateway answers; its answer."""
    answer = b""
    for _ in range(times):
        try:
            sock.sendall(piece)
        except OSError:
            break
        time.sleep(gap_s)
        sock.setblocking(False)
        try:
            answer += sock.recv(65536)
        except BlockingIOError:
            pass
        finally:
            sock.settimeout(10.0)
        if answer:
            break
    return answer + read_all(sock)


def _chat(content_bytes: int) -> bytes:
    return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * content_bytes}], "stream": True})


def test_headers_trickling_in_get_408(limited: RunningGateway) -> None:
    with slow_socket(limited.port, b"POST /v1/chat/completions HTTP/1.1\r\n") as sock:
        # one byte every 0.05 s: each read is quick, the head never completes in time
        answer = _trickle(sock, b"X", 0.05, 100)
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


MESSAGES_HEAD = b"POST /v1/messages?beta=true HTTP/1.1\r\nHost: kvgate\r\nContent-Type: application/json\r\n"


def _anthropic_error(raw: bytes) -> tuple[int, bytes, dict[str, Any]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower(), head
    parsed = orjson.loads(body)
    assert parsed["type"] == "error" and set(parsed["error"]) == {"type", "message"}, parsed
    return int(head.split(b" ", 2)[1]), head.lower(), parsed["error"]


def test_limits_answer_a_messages_request_in_anthropics_shape(limited: RunningGateway) -> None:
    with slow_socket(limited.port, MESSAGES_HEAD + b"Content-Length: 100\r\n\r\n{\"model\"") as sock:
        status, head, error = _anthropic_error(read_all(sock))
    assert status == 408 and error["type"] == "invalid_request_error" and "body_timeout_s" in error["message"]
    assert b"\r\nrequest-id: " in head  # the Anthropic SDK's request id
    with slow_socket(limited.port, MESSAGES_HEAD + b"X-Big: " + b"a" * 5000 + b"\r\nContent-Length: 2\r\n\r\n{}") as sock:
        status, _, error = _anthropic_error(read_all(sock))
    assert status == 431 and "max_header_bytes" in error["message"]
    with slow_socket(limited.port, HEAD + b"Content-Length: 100\r\n\r\n{\"model\"") as sock:
        status, error = _status_and_error(read_all(sock))  # the OpenAI routes keep OpenAI's shape
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


# -- the body's rate (server.body_min_rate, body_grace_s, body_max_s) ------------------------------------


def test_a_body_trickled_below_body_min_rate_gets_408_and_is_closed(rated: RunningGateway) -> None:
    with slow_socket(rated.port, HEAD + b"Content-Length: 100000\r\n\r\n") as sock:
        # 20 bytes every 0.1 s (200 bytes/s): never silent for body_timeout_s, far under the rate
        status, error = _status_and_error(_trickle(sock, b"x" * 20, 0.1, 100))
        assert _closed(sock)
    assert status == 408 and error["code"] == "request_timeout"
    assert "server.body_min_rate" in error["message"] and "2000 bytes/s" in error["message"], error


def test_a_body_above_body_min_rate_is_served(rated: RunningGateway) -> None:
    body = _chat(12000)
    with slow_socket(rated.port, HEAD + b"Content-Length: %d\r\n\r\n" % len(body)) as sock:
        for start in range(0, len(body), 1000):  # 1000 bytes every 0.1 s (10 kB/s) for 1.2 s: past the grace
            time.sleep(0.1)
            sock.sendall(body[start : start + 1000])
        answer = read_until(sock, b"data: [DONE]")
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]


def test_body_min_rate_0_is_off(limited: RunningGateway) -> None:
    """The same trickle as above (200 bytes/s, long past a 0.1 s grace) is served when the rate is 0."""
    body = _chat(100)
    with slow_socket(limited.port, HEAD + b"Content-Length: %d\r\n\r\n" % len(body)) as sock:
        for start in range(0, len(body), 20):
            time.sleep(0.1)
            sock.sendall(body[start : start + 20])
        answer = read_until(sock, b"data: [DONE]")
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]


def test_body_max_s_caps_a_fast_body_that_never_ends(rated: RunningGateway) -> None:
    with slow_socket(rated.port, HEAD + b"Content-Length: 1000000\r\n\r\n") as sock:
        # 2000 bytes every 0.05 s (40 kB/s, 20 times the minimum): only the 2.5 s cap stops it
        status, error = _status_and_error(_trickle(sock, b"x" * 2000, 0.05, 400))
        assert _closed(sock)
    assert status == 408 and "server.body_max_s" in error["message"], error


def test_time_the_gateway_holds_a_body_back_does_not_count(rated: RunningGateway) -> None:
    """A pipelined request's body waits (reading paused) for the stream before it, 2 s: past the
    grace, the cap and any rate its first 50 bytes could make; once reading resumes it is served."""
    first, second = _chat(10), _chat(100)
    pipelined = HEAD + b"Content-Length: %d\r\n\r\n" % len(first) + first
    pipelined += HEAD + b"Content-Length: %d\r\n\r\n" % len(second) + second[:50]
    with slow_socket(rated.port, pipelined) as sock:
        answer = read_until(sock, b"data: [DONE]")
        assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
        rest = answer.partition(b"data: [DONE]")[2]
        sock.sendall(second[50:])
        rest += read_until(sock, b"data: [DONE]")
    second_answer = rest[rest.find(b"HTTP/1.1 ") :]  # after the first answer's last chunk
    assert second_answer.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in second_answer, rest[:300]


@pytest.mark.parametrize("coding", [b"gzip, chunked", b"gzip", b"identity", b"deflate"])
def test_a_transfer_coding_other_than_chunked_gets_501(limited: RunningGateway, coding: bytes) -> None:
    body = b'{"model": "m", "messages": []}'
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    with slow_socket(limited.port, HEAD + b"Transfer-Encoding: " + coding + b"\r\n\r\n" + chunked) as sock:
        status, error = _status_and_error(read_all(sock))
    assert status == 501 and error["code"] == "unsupported_transfer_coding", (coding, error)


@pytest.mark.parametrize("heads", [b"Transfer-Encoding: chunked, chunked\r\n",
                                   b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
                                   b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n"])
def test_chunked_twice_or_with_a_length_is_a_bad_request(limited: RunningGateway, heads: bytes) -> None:
    with slow_socket(limited.port, HEAD + heads + b"\r\n0\r\n\r\n") as sock:  # RFC 9112 6.1, 6.3: 400
        status, error = _status_and_error(read_all(sock))
    assert status == 400 and error["code"] == "invalid_http_request", error
