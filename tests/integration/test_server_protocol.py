"""kvgate's own HTTP protocol (``gateway/api/server.py``) over real sockets.

:class:`~gateway.api.server.KvgateHttpProtocol` serves ``POST /v1/chat/completions`` and
``POST /v1/completions`` through :class:`~gateway.api.server.InferenceCycle`, beside uvicorn's
ASGI cycle, and takes over connection details uvicorn's ``send``/``receive`` handled before:
bodies in pieces, ``Expect: 100-continue``, pipelining, HTTP/1.0, the body limit and closing the
connection when a body is left unread, the request id, internal errors and client disconnects.
Each test here checks one of those on a raw socket (where the bytes on the wire matter) or with
httpx and the real ``openai`` SDK, and that the fast path was really taken (or not): a wrapper
around ``InferenceCycle._serve`` counts the requests it served.

The gateways of this module share the session's fake endpoint ``fake_a``; ``proto`` runs the
default settings, ``logged`` has the access log on and ``traced`` a tracer provider: all three
serve inference by the raw door (the switches add effects, never a path), and ``asgi`` serves it
by the ASGI door (``RunningGateway(door="asgi")``). Their answers must not differ.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway.api.server import InferenceCycle
from tests.integration.conftest import CLIENT_KEY, NEVER_EJECT, SHORT_RETRY_WAIT
from tests.support.fake_upstream import USAGE, FakeUpstream
from tests.support.gateway import RunningGateway, chat_body, error_shape_ok, metric, raw_request, read_until, sse_data
from tests.support.threads import wait_until

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
LIMIT = 2048  # server.max_body_bytes of the gateways here (1024 is the smallest allowed)
ENDPOINT = "proto-a"
GENERATED_ID = re.compile(r"[0-9a-f]{32}")
PAUSE_S = 0.05  # between the TCP segments of one request: long enough for the server to read each


def _start(fake: FakeUpstream, server: dict[str, Any] | None = None, **app_kwargs: Any) -> RunningGateway:
    """A gateway whose one model ``qwen-fast`` is served by ``fake``; ``server`` adds to ``[server]``."""
    data = {
        "server": {"max_body_bytes": LIMIT, **(server or {})},
        "upstream": SHORT_RETRY_WAIT,
        **NEVER_EJECT,
        "clusters": {"fast": {"endpoints": [{"name": ENDPOINT, "url": fake.base_url, "model": "qwen-served"}]}},
        "models": {"qwen-fast": {"cluster": "fast"}},
    }
    return RunningGateway(data, health_checks=False, **app_kwargs).start()


@pytest.fixture(scope="module")
def proto(fake_a: FakeUpstream) -> Iterator[RunningGateway]:
    """Default settings: inference is served by :class:`InferenceCycle`."""
    gateway = _start(fake_a)
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def asgi(fake_a: FakeUpstream) -> Iterator[RunningGateway]:
    """Default settings, inference by the ASGI door (``GatewayApp`` hands it to the same edge)."""
    gateway = RunningGateway(
        {
            "server": {"max_body_bytes": LIMIT},
            "upstream": SHORT_RETRY_WAIT,
            **NEVER_EJECT,
            "clusters": {"fast": {"endpoints": [{"name": ENDPOINT, "url": fake_a.base_url, "model": "qwen-served"}]}},
            "models": {"qwen-fast": {"cluster": "fast"}},
        },
        door="asgi",
        health_checks=False,
    ).start()
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def logged(fake_a: FakeUpstream) -> Iterator[RunningGateway]:
    """The access log on: inference still by the raw door (the edge writes the line)."""
    gateway = _start(fake_a, server={"access_log": True})
    yield gateway
    gateway.stop()


@pytest.fixture(scope="module")
def traced(fake_a: FakeUpstream) -> Iterator[RunningGateway]:
    """Tracing on (an in-memory exporter): inference still by the raw door (the edge owns the span)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    gateway = _start(fake_a, tracer_provider=provider)
    yield gateway
    gateway.stop()
    provider.shutdown()


@pytest.fixture
def fast_serves(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths :class:`InferenceCycle` served during the test (the server thread appends)."""
    served: list[str] = []
    original = InferenceCycle._serve

    async def counting(self: InferenceCycle) -> None:
        served.append(self.scope["path"])
        await original(self)

    monkeypatch.setattr(InferenceCycle, "_serve", counting)
    return served


# --- a raw HTTP/1.1 client --------------------------------------------------------------------


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


class RawConnection:
    """One client connection on a plain socket: the test decides every byte and when it is sent."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self._buffer = b""

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"connection closed by the server; unparsed: {self._buffer!r}")
        self._buffer += chunk

    def _take_until(self, marker: bytes) -> bytes:
        while marker not in self._buffer:
            self._fill()
        head, self._buffer = self._buffer.split(marker, 1)
        return head

    def _take(self, size: int) -> bytes:
        while len(self._buffer) < size:
            self._fill()
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data

    def read_response(self) -> RawResponse:
        """The next response (a ``100 Continue`` is a response of its own), body de-chunked."""
        head = self._take_until(b"\r\n\r\n").decode("latin-1")
        status_line, *lines = head.split("\r\n")
        assert status_line.startswith("HTTP/1.1 "), status_line
        status = int(status_line.split(" ")[1])
        headers: dict[str, str] = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if status == 100:
            return RawResponse(status, headers, b"")
        if "content-length" in headers:
            return RawResponse(status, headers, self._take(int(headers["content-length"])))
        assert headers.get("transfer-encoding") == "chunked", headers
        body = b""
        while True:
            size = int(self._take_until(b"\r\n"), 16)
            if size == 0:
                self._take_until(b"\r\n")
                return RawResponse(status, headers, body)
            body += self._take(size)
            self._take(2)

    def closed_by_server(self) -> bool:
        """True once the server has closed the connection (and nothing more was sent)."""
        if self._buffer:
            return False
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False


def request_bytes(
    path: str,
    body: bytes | None = None,
    *,
    version: str = "1.1",
    headers: dict[str, str] | None = None,
    method: str = "POST",
) -> bytes:
    """One request's bytes; ``Content-Length`` from ``body`` unless ``headers`` set framing."""
    lines = [f"{method} {path} HTTP/{version}", "Host: 127.0.0.1", "Content-Type: application/json"]
    given = {name.lower() for name in (headers or {})}
    if body is not None and not given & {"content-length", "transfer-encoding"}:
        lines.append(f"Content-Length: {len(body)}")
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b"")


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def _error(response: RawResponse | httpx.Response) -> dict[str, Any]:
    assert response.headers["content-type"].startswith("application/json"), response.headers
    payload = orjson.loads(response.body if isinstance(response, RawResponse) else response.content)
    assert error_shape_ok(payload), payload
    return payload["error"]


# --- which requests take the fast path, and that it answers the same ---------------------------


def test_the_gateways_here_are_the_ones_the_tests_assume(
    proto: RunningGateway, logged: RunningGateway, traced: RunningGateway, asgi: RunningGateway
) -> None:
    """The comparisons below mean nothing unless the gateways differ as their fixtures say.

    (Before issue 18 the access log and tracing switched the fast path off: ``logged`` and
    ``traced`` took the ASGI path. Now both switches keep the raw door; ``asgi`` is the ASGI door.)
    """
    assert (proto.door, logged.door, traced.door, asgi.door) == ("raw", "raw", "raw", "asgi")
    assert logged.settings.server.access_log and not proto.settings.server.access_log
    assert traced.app.state.container.ops.tracer is not None and proto.app.state.container.ops.tracer is None


# (id, path, JSON body)
SAME_ANSWER = [
    ("chat", CHAT, chat_body("same answer")),
    ("completion", COMPLETIONS, {"model": "qwen-fast", "prompt": "same answer"}),
    ("chat-stream", CHAT, chat_body(stream=True, stream_options={"include_usage": True})),
    ("completion-stream", COMPLETIONS, {"model": "qwen-fast", "prompt": "x", "stream": True}),
    ("bad-request", CHAT, {"model": "qwen-fast"}),
    ("unknown-model", COMPLETIONS, {"model": "gpt-nope", "prompt": "x"}),
    ("upstream-400", CHAT, chat_body(fake="status:400")),
    ("upstream-500", CHAT, chat_body(fake="status:500")),
    ("upstream-429", CHAT, chat_body(fake="status:429")),
]


def _answer(response: httpx.Response) -> dict[str, Any]:
    """What a client can see of an answer, minus what legitimately differs (date)."""
    content_type = response.headers.get("content-type", "")
    body: Any = sse_data(response.content) if content_type.startswith("text/event-stream") else response.json()
    return {
        "status": response.status_code,
        "content-type": content_type,
        "kvgate": {name: value for name, value in response.headers.items() if name.startswith("x-kvgate-")},
        "x-request-id": response.headers.get("x-request-id"),
        "retry-after": response.headers.get("retry-after"),
        "body": body,
    }


@pytest.mark.parametrize(("path", "body"), [case[1:] for case in SAME_ANSWER], ids=[case[0] for case in SAME_ANSWER])
def test_fast_and_asgi_paths_give_the_same_answer(
    proto: RunningGateway,
    logged: RunningGateway,
    traced: RunningGateway,
    asgi: RunningGateway,
    http: httpx.Client,
    fast_serves: list[str],
    path: str,
    body: dict[str, Any],
) -> None:
    """The fast path replaces a generic path; a client must not be able to tell them apart.

    A query string keeps the request off :class:`InferenceCycle` (the protocol matches the raw
    URL) and on ``GatewayApp``'s ASGI door, as does the ``asgi`` gateway; the access log and
    tracing keep it on the raw door, with their effects.
    """
    headers = {"X-Request-Id": "same-id-1"}
    fast = _answer(http.post(proto.url + path, json=body, headers=headers))
    assert fast_serves == [path], "the fast path was not taken with the default settings"
    assert fast["x-request-id"] == "same-id-1"
    if body.get("fake") == "status:429":
        assert fast["retry-after"] == "7"
    if fast["status"] == 200:
        assert fast["kvgate"]["x-kvgate-endpoint"] == ENDPOINT
        assert fast["kvgate"]["x-kvgate-cluster"] == "fast"
    others = [
        ("query", proto.url + path + "?via=asgi"), ("asgi-door", asgi.url + path),
        ("access-log", logged.url + path), ("tracing", traced.url + path),
    ]
    for name, url in others:
        other = _answer(http.post(url, json=body, headers=headers))
        assert other == fast, f"{name} answered differently"
    # the raw door: proto, then logged and traced (the switches never change the door); never the ASGI ones
    assert fast_serves == [path] * 3, "a request took the wrong door"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/v1/models", 200), ("GET", CHAT, 405), ("POST", "/v1/models", 405), ("POST", CHAT + "/", 404), ("GET", "/health", 200)],
    ids=["models", "get-chat", "post-models", "trailing-slash", "health"],
)
def test_other_requests_never_take_the_fast_path(
    proto: RunningGateway, http: httpx.Client, fast_serves: list[str], method: str, path: str, status: int
) -> None:
    """Only ``POST`` on the two exact inference paths is the protocol's; the rest is the app's."""
    response = http.request(method, proto.url + path, json={} if method == "POST" else None)
    assert response.status_code == status, response.text
    assert response.headers.get("x-request-id")
    assert fast_serves == []


# --- bodies, Expect: 100-continue, pipelining, HTTP/1.0 ----------------------------------------


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_in_several_segments_is_read_whole(
    proto: RunningGateway, fake_a: FakeUpstream, fast_serves: list[str], chunked: bool
) -> None:
    """A body that arrives over several reads (a slow client) must be joined, never cut short."""
    content = "segments-" + "0123456789" * 120
    body = orjson.dumps(chat_body(content))
    assert 1024 < len(body) <= LIMIT
    parts = [body[:300], body[300:900], body[900:]]
    if chunked:
        head = request_bytes(CHAT, headers={"Transfer-Encoding": "chunked"})
        segments = [chunk(part) for part in parts]
        segments[-1] += b"0\r\n\r\n"
    else:
        head = request_bytes(CHAT, headers={"Content-Length": str(len(body))})
        segments = parts
    with RawConnection(proto.port) as conn:
        conn.send(head)
        for segment in segments:
            time.sleep(PAUSE_S)
            conn.send(segment)
        response = conn.read_response()
    assert response.status == 200, response.body
    assert fake_a.last["body"]["messages"][0]["content"] == content
    assert response.json()["choices"][0]["message"]["content"] == "echo from a"
    assert fast_serves == [CHAT]


def test_expect_100_continue_is_answered_before_the_body(proto: RunningGateway, fast_serves: list[str]) -> None:
    """A client that sends ``Expect: 100-continue`` waits for ``100 Continue`` before its body."""
    body = orjson.dumps(chat_body("after the interim response"))
    with RawConnection(proto.port) as conn:
        conn.send(request_bytes(CHAT, headers={"Content-Length": str(len(body)), "Expect": "100-continue"}))
        interim = conn.read_response()
        assert interim.status == 100
        conn.send(body)
        response = conn.read_response()
        assert response.status == 200, response.body
        assert response.json()["object"] == "chat.completion"
        assert "connection" not in response.headers  # still keep-alive
    assert fast_serves == [CHAT]


def test_expect_100_continue_with_a_body_too_large_gets_413_without_100(proto: RunningGateway, fast_serves: list[str]) -> None:
    """The declared size is refused at once: no ``100 Continue`` invites a body that will be refused."""
    with RawConnection(proto.port) as conn:
        conn.send(request_bytes(CHAT, headers={"Content-Length": str(LIMIT + 1), "Expect": "100-continue"}))
        response = conn.read_response()
        assert response.status == 413
        assert _error(response)["code"] == "request_too_large"
        assert response.headers["connection"] == "close"
        assert conn.closed_by_server()
    assert fast_serves == [CHAT]


# What one pipelined request is: (method, path, JSON body, status, "object" of the answer or error code)
PIPED = {
    "chat": ("POST", CHAT, chat_body("piped"), 200, "chat.completion"),
    "completion": ("POST", COMPLETIONS, {"model": "qwen-fast", "prompt": "piped"}, 200, "text_completion"),
    "stream": ("POST", CHAT, chat_body("piped", stream=True), 200, None),
    "models": ("GET", "/v1/models", None, 200, "list"),
    # answered without an upstream: done before any request ahead of it, were it not queued
    "unknown-model": ("POST", COMPLETIONS, {"model": "gpt-nope", "prompt": "x"}, 404, "model_not_found"),
}


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("chat", "completion"),
        ("chat", "models"),
        ("models", "chat"),
        ("completion", "completion"),
        ("chat", "unknown-model"),
        ("stream", "unknown-model"),
        ("stream", "chat"),
    ],
    ids=lambda name: name,
)
def test_pipelined_requests_are_answered_in_order(proto: RunningGateway, fast_serves: list[str], first: str, second: str) -> None:
    """Both requests are written before either answer is read; answers must come in request order,
    also when the second (an error needing no upstream) is ready long before the first."""
    requests = []
    for index, name in enumerate((first, second)):
        method, path, body, _, _ = PIPED[name]
        payload = None if body is None else orjson.dumps(body)
        requests.append(request_bytes(path, payload, method=method, headers={"X-Request-Id": f"piped-{index}"}))
    with RawConnection(proto.port) as conn:
        conn.send(b"".join(requests))
        answers = [conn.read_response(), conn.read_response()]
    for index, (name, answer) in enumerate(zip((first, second), answers, strict=True)):
        _, _, _, status, kind = PIPED[name]
        assert answer.status == status, answer.body
        assert answer.headers["x-request-id"] == f"piped-{index}"
        if kind is None:  # a stream
            assert answer.headers["content-type"].startswith("text/event-stream")
            assert sse_data(answer.body)[-1] == "[DONE]"
        elif status == 200:
            assert answer.json()["object"] == kind
        else:
            assert _error(answer)["code"] == kind
    assert fast_serves == [PIPED[name][1] for name in (first, second) if PIPED[name][1] != "/v1/models"]


@pytest.mark.parametrize(
    ("version", "headers"), [("1.0", {}), ("1.0", {"Connection": "keep-alive"}), ("1.1", {"Connection": "close"})],
    ids=["http-1.0", "http-1.0-keep-alive", "http-1.1-close"],
)
def test_a_connection_the_client_will_not_reuse_is_closed_after_the_answer(
    proto: RunningGateway, fast_serves: list[str], version: str, headers: dict[str, str]
) -> None:
    """HTTP/1.0 (uvicorn keeps no 1.0 connection alive) and ``Connection: close`` end with the answer."""
    body = orjson.dumps(chat_body("old client"))
    with RawConnection(proto.port) as conn:
        conn.send(request_bytes(CHAT, body, version=version, headers=headers))
        response = conn.read_response()
        assert response.status == 200, response.body
        assert response.json()["choices"][0]["message"]["content"] == "echo from a"
        assert response.headers["connection"] == "close"
        assert conn.closed_by_server()
    assert fast_serves == [CHAT]


# --- the body limit ----------------------------------------------------------------------------


def test_a_declared_body_over_the_limit_is_413_and_the_connection_closed(
    proto: RunningGateway, fake_a: FakeUpstream, fast_serves: list[str]
) -> None:
    """Refused on ``Content-Length`` alone; the unread rest of the body must not be parsed as a request."""
    seen = len(fake_a.requests)
    with RawConnection(proto.port) as conn:
        conn.send(request_bytes(CHAT, headers={"Content-Length": str(LIMIT + 1), "X-Request-Id": "too-big-1"}) + b'{"model": ')
        response = conn.read_response()
        assert response.status == 413
        error = _error(response)
        assert error["type"] == "invalid_request_error"
        assert error["code"] == "request_too_large"
        assert response.headers["x-request-id"] == "too-big-1"
        assert response.headers["connection"] == "close"
        assert conn.closed_by_server()
    assert len(fake_a.requests) == seen
    assert fast_serves == [CHAT]


def test_a_chunked_body_over_the_limit_is_413_and_the_connection_closed(
    proto: RunningGateway, fake_a: FakeUpstream, fast_serves: list[str]
) -> None:
    """No ``Content-Length`` to check: the limit applies to the bytes read, before the body ends."""
    seen = len(fake_a.requests)
    piece = b"x" * (LIMIT // 2 + 1)
    with RawConnection(proto.port) as conn:
        conn.send(request_bytes(CHAT, headers={"Transfer-Encoding": "chunked"}) + chunk(piece) + chunk(piece))
        response = conn.read_response()  # the body never ended: no terminating chunk was sent
        assert response.status == 413
        assert _error(response)["code"] == "request_too_large"
        assert GENERATED_ID.fullmatch(response.headers["x-request-id"])
        assert response.headers["connection"] == "close"
        assert conn.closed_by_server()
    assert len(fake_a.requests) == seen
    assert fast_serves == [CHAT]


@pytest.mark.parametrize("framing", ["declared", "chunked"])
def test_a_client_that_sends_its_whole_body_before_reading_still_reads_the_413(
    proto: RunningGateway, fake_a: FakeUpstream, fast_serves: list[str], framing: str
) -> None:
    """As most HTTP clients do: the whole body first, the answer after. The gateway answers 413 early
    and closes without a reset (its write side first, then the rest of the body read and dropped),
    so the upload finishes and the answer is there to read (a close with the body unread would reset
    the connection: the send fails and the 413 is lost)."""
    seen = len(fake_a.requests)
    body = b"x" * (LIMIT * 1024)  # 2 MiB: far more than the socket buffers hold
    if framing == "declared":
        data = request_bytes(CHAT, headers={"Content-Length": str(len(body))}) + body
    else:
        data = request_bytes(CHAT, headers={"Transfer-Encoding": "chunked"}) + b"".join(
            chunk(body[offset : offset + 65536]) for offset in range(0, len(body), 65536)
        ) + b"0\r\n\r\n"
    with RawConnection(proto.port) as conn:
        for offset in range(0, len(data), 65536):
            conn.send(data[offset : offset + 65536])  # raises ConnectionResetError / BrokenPipeError after a reset
        response = conn.read_response()
        assert response.status == 413 and _error(response)["code"] == "request_too_large"
        assert response.headers["connection"] == "close"
        assert conn.closed_by_server()
    assert len(fake_a.requests) == seen


@pytest.mark.parametrize(
    ("refusal", "status", "code"),
    [("head", 431, "request_header_fields_too_large"), ("coding", 501, "unsupported_transfer_coding")],
)
def test_a_protocol_refusal_to_a_client_still_sending_is_read_not_reset(
    proto: RunningGateway, refusal: str, status: int, code: str
) -> None:
    """The protocol's own refusals close by a lingering close too: a head over ``max_header_bytes``
    (60 KiB by default) or a body in a transfer coding kvgate does not read, followed by 2 MiB more."""
    if refusal == "head":
        head = request_bytes(CHAT, headers={f"X-Filler-{i}": "y" * 1000 for i in range(80)})[:-2]
    else:
        head = request_bytes(CHAT, headers={"Transfer-Encoding": "gzip, chunked"})
    data = head + b"x" * (2 * 1024 * 1024)
    with RawConnection(proto.port) as conn:
        for offset in range(0, len(data), 65536):
            conn.send(data[offset : offset + 65536])  # raises ConnectionResetError / BrokenPipeError after a reset
        response = conn.read_response()
        assert response.status == status and _error(response)["code"] == code
        assert conn.closed_by_server()


def test_a_body_at_the_limit_is_accepted(proto: RunningGateway, fast_serves: list[str]) -> None:
    """The limit is inclusive: exactly ``max_body_bytes`` is served."""
    body = orjson.dumps(chat_body("x"))
    body = orjson.dumps(chat_body("x" * (LIMIT - len(body) + 1)))
    assert len(body) == LIMIT
    with RawConnection(proto.port) as conn:
        conn.send(request_bytes(CHAT, body))
        assert conn.read_response().status == 200
    assert fast_serves == [CHAT]


# --- authentication and the request id ---------------------------------------------------------

AUTH = [
    ("missing", None, 401),
    ("wrong-key", "Bearer sk-kvgate-test-wrong-key", 401),
    ("not-bearer", f"Basic {CLIENT_KEY}", 401),
    ("right-key", f"Bearer {CLIENT_KEY}", 200),
]


@pytest.mark.parametrize(("authorization", "status"), [case[1:] for case in AUTH], ids=[case[0] for case in AUTH])
@pytest.mark.parametrize("path", [CHAT, COMPLETIONS], ids=["chat", "completions"])
def test_client_keys_are_checked_on_the_fast_path(
    auth_gateway: RunningGateway, http: httpx.Client, fast_serves: list[str], path: str, authorization: str | None, status: int
) -> None:
    """The fast path authenticates itself; a 401 is OpenAI-shaped, with a request id, and no key."""
    body = chat_body() if path == CHAT else {"model": "qwen-fast", "prompt": "x"}
    headers = {} if authorization is None else {"Authorization": authorization}
    response = http.post(auth_gateway.url + path, json=body, headers=headers)
    assert response.status_code == status, response.text
    assert GENERATED_ID.fullmatch(response.headers["x-request-id"])
    if status == 401:
        error = _error(response)
        assert error["code"] == "invalid_api_key"
        assert error["type"] == "invalid_request_error"
        assert CLIENT_KEY not in response.text
    assert fast_serves == [path]


def test_a_401_comes_before_the_body_is_invited(auth_gateway: RunningGateway, fast_serves: list[str]) -> None:
    """Without a key, ``Expect: 100-continue`` is answered 401 at once, and the unsent body closes it."""
    with RawConnection(auth_gateway.port) as conn:
        conn.send(request_bytes(CHAT, headers={"Content-Length": "100", "Expect": "100-continue", "X-Request-Id": "no-key"}))
        response = conn.read_response()
        assert response.status == 401
        assert _error(response)["code"] == "invalid_api_key"
        assert response.headers["x-request-id"] == "no-key"
        assert conn.closed_by_server()
    assert fast_serves == [CHAT]


@pytest.mark.parametrize(
    "authorizations",
    [(f"Bearer {CLIENT_KEY}", "Bearer sk-kvgate-test-wrong-key"), ("Bearer sk-kvgate-test-wrong-key", f"Bearer {CLIENT_KEY}")],
    ids=["right-then-wrong", "wrong-then-right"],
)
def test_a_repeated_header_is_read_the_same_on_both_paths(
    auth_gateway: RunningGateway, fast_serves: list[str], authorizations: tuple[str, str]
) -> None:
    """The fast path promises the ASGI path's semantics, header by header: the first of repeated
    headers wins (Starlette's ``Headers.get``), so one request is never accepted on one path and
    refused on the other. (A plain dict of the headers kept the last one.)"""
    statuses = []
    body = orjson.dumps(chat_body())
    for path in (CHAT, CHAT + "?via=asgi"):
        request = request_bytes(path, body).replace(
            b"\r\n\r\n", "".join(f"\r\nAuthorization: {value}" for value in authorizations).encode() + b"\r\n\r\n", 1
        )
        with RawConnection(auth_gateway.port) as conn:
            conn.send(request)
            statuses.append(conn.read_response().status)
    assert fast_serves == [CHAT]
    assert statuses[0] == statuses[1]
    assert statuses[0] == (200 if authorizations[0].endswith(CLIENT_KEY) else 401)


def test_the_request_id_is_echoed_or_generated(proto: RunningGateway, http: httpx.Client, fast_serves: list[str]) -> None:
    """``X-Request-Id`` in comes back out; without one (or an insane one) each answer gets a fresh id."""
    echoed = http.post(proto.url + CHAT, json=chat_body(), headers={"X-Request-Id": "client-id:42"})
    assert echoed.headers["x-request-id"] == "client-id:42"
    generated = [http.post(proto.url + CHAT, json=chat_body()).headers["x-request-id"] for _ in range(2)]
    assert all(GENERATED_ID.fullmatch(value) for value in generated), generated
    assert generated[0] != generated[1]
    replaced = http.post(proto.url + CHAT, json=chat_body(), headers={"X-Request-Id": "has space"})
    assert GENERATED_ID.fullmatch(replaced.headers["x-request-id"])
    assert fast_serves == [CHAT] * 4


# --- internal errors and disconnects -----------------------------------------------------------


def test_an_unexpected_exception_is_an_openai_500_and_the_connection_serves_on(
    proto: RunningGateway, fast_serves: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in a handler is logged, answered as OpenAI's ``server_error`` (never a trace), and the
    connection stays usable for the next request."""

    async def broken_select(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("selector exploded: secret internals")

    body = orjson.dumps(chat_body("will fail"))
    with RawConnection(proto.port) as conn:
        with monkeypatch.context() as patch:
            patch.setattr(proto.app.state.container.selector, "select", broken_select)
            conn.send(request_bytes(CHAT, body, headers={"X-Request-Id": "boom-1"}))
            failed = conn.read_response()
        assert failed.status == 500
        error = _error(failed)
        assert error["type"] == "server_error"
        assert "exploded" not in failed.body.decode() and "Traceback" not in failed.body.decode()
        assert failed.headers["x-request-id"] == "boom-1"
        conn.send(request_bytes(CHAT, body, headers={"X-Request-Id": "after-boom"}))
        recovered = conn.read_response()
    assert recovered.status == 200, recovered.body
    assert recovered.headers["x-request-id"] == "after-boom"
    assert fast_serves == [CHAT, CHAT]


def test_a_500_before_the_body_was_read_closes_the_connection(
    proto: RunningGateway, fast_serves: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As for a 401 or a 413 before the body: bytes left unread must not be taken for the next request.

    (``run_asgi`` once answered a keep-alive 500 here: the next request on the connection was
    parsed as the rest of this one's body and got uvicorn's plain-text 400.)"""

    def broken_authenticate(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("gate exploded")

    monkeypatch.setattr(proto.app.state.container.ops.gate, "authenticate", broken_authenticate)
    with RawConnection(proto.port) as conn:
        conn.send(request_bytes(CHAT, headers={"Content-Length": "100", "Expect": "100-continue"}))
        response = conn.read_response()
        assert response.status == 500
        assert _error(response)["type"] == "server_error"
        assert fast_serves == [CHAT]
        assert response.headers.get("connection") == "close"
        assert conn.closed_by_server()


def _outcomes(gateway: RunningGateway) -> dict[str, float]:
    text = gateway.metrics_text()
    return {
        outcome: metric(text, "kvgate_requests_total", endpoint=ENDPOINT, outcome=outcome)
        for outcome in ("cancelled", "success", "upstream_error", "client_error")
    }


@pytest.mark.parametrize(("script", "stream"), [("hang", False), ("hang_stream", True)], ids=["waiting-for-answer", "mid-stream"])
def test_a_client_that_leaves_aborts_the_upstream_and_counts_as_cancelled(
    proto: RunningGateway, fake_a: FakeUpstream, fast_serves: list[str], script: str, stream: bool
) -> None:
    """The protocol sees the connection close (no ``receive()`` watcher) and cancels the forwarding."""
    # a stream of an earlier test is counted just after its last bytes were sent: let it settle
    assert wait_until(lambda: proto.metric("kvgate_endpoint_in_flight", endpoint=ENDPOINT) == 0)
    before = _outcomes(proto)
    active, cancelled = fake_a.active, fake_a.cancelled
    sock = raw_request(proto.port, CHAT, chat_body(fake=script, stream=stream))
    try:
        assert wait_until(lambda: fake_a.active == active + 1), "the request never reached the endpoint"
        if stream:
            head = read_until(sock, b"Hello")
            assert head.startswith(b"HTTP/1.1 200"), head
    finally:
        sock.close()
    assert wait_until(lambda: fake_a.cancelled == cancelled + 1), "the upstream request was not aborted"
    assert wait_until(lambda: _outcomes(proto)["cancelled"] == before["cancelled"] + 1)
    after = _outcomes(proto)
    assert {k: v for k, v in after.items() if k != "cancelled"} == {k: v for k, v in before.items() if k != "cancelled"}
    assert wait_until(lambda: proto.metric("kvgate_endpoint_in_flight", endpoint=ENDPOINT) == 0)
    assert fake_a.active == active
    assert fast_serves == [CHAT]


# --- streaming with the openai SDK -------------------------------------------------------------


@pytest.fixture
def sdk(proto: RunningGateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=proto.base_url, api_key="sk-unused", max_retries=0) as client:
        yield client


@pytest.mark.parametrize("include_usage", [True, False], ids=["with-usage", "without-usage"])
def test_a_chat_stream_through_the_fast_path_with_the_sdk(sdk: openai.OpenAI, fast_serves: list[str], include_usage: bool) -> None:
    """Streams leave the fast path through uvicorn's ASGI ``send``; the SDK must parse them as OpenAI's."""
    raw = sdk.chat.completions.with_raw_response.create(
        model="qwen-fast",
        messages=[{"role": "user", "content": "stream please"}],
        stream=True,
        stream_options={"include_usage": include_usage},
        extra_headers={"X-Request-Id": "sdk-stream-1"},
    )
    assert raw.headers["x-kvgate-endpoint"] == ENDPOINT
    assert raw.headers["x-request-id"] == "sdk-stream-1"
    chunks = list(raw.parse())
    text = "".join(choice.delta.content or "" for part in chunks for choice in part.choices)
    assert text == "Hello from a"
    assert [choice.finish_reason for part in chunks for choice in part.choices if choice.finish_reason] == ["stop"]
    if include_usage:
        assert chunks[-1].choices == []
        assert chunks[-1].usage is not None
        assert chunks[-1].usage.total_tokens == USAGE["total_tokens"]
        assert chunks[-1].usage.prompt_tokens == USAGE["prompt_tokens"]
    else:
        assert all(part.usage is None for part in chunks)
    assert fast_serves == [CHAT]


def test_a_completion_stream_through_the_fast_path_with_the_sdk(sdk: openai.OpenAI, fast_serves: list[str]) -> None:
    """The legacy completions stream takes the same way out, usage chunk included."""
    stream = sdk.completions.create(model="qwen-fast", prompt="stream please", stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(choice.text for part in chunks for choice in part.choices) == "Hello from a"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == USAGE["completion_tokens"]
    assert fast_serves == [COMPLETIONS]


def test_a_plain_completion_through_the_fast_path_with_the_sdk(sdk: openai.OpenAI, fast_serves: list[str]) -> None:
    """A buffered answer is written by the protocol itself; the SDK must still parse it."""
    completion = sdk.chat.completions.create(model="qwen-fast", messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "echo from a"
    assert completion.usage is not None and completion.usage.total_tokens == USAGE["total_tokens"]
    assert fast_serves == [CHAT]
