"""A real kvgate on loopback for integration and compat tests, plus readers for what it exposes.

:class:`RunningGateway` builds the app with ``create_app(build_settings(data))`` and serves it
with uvicorn in a :class:`~tests.support.threads.ServerThread`. :func:`metric` sums Prometheus
samples by name and label subset, so tests assert on deltas of ``/metrics``. :func:`raw_request`
opens a plain socket and writes one HTTP/1.1 request, for tests that must decide exactly when the
client goes away.
"""

from __future__ import annotations

import socket
from typing import Any

import httpx
import orjson
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.endpoints.model import Endpoint
from gateway.config import build_settings
from tests.support.threads import ServerThread


class RefusingPort:
    """A loopback port held bound but never listening: connecting to it is refused at once.

    Holding the socket keeps the port from being handed to another server while tests run.
    """

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = int(self._sock.getsockname()[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        self._sock.close()


class RunningGateway:
    """kvgate serving ``settings_data`` (a TOML-shaped dict) on a free loopback port.

    ``door``: ``"raw"`` (the protocol's raw inference door, as ``kvgate serve``) or ``"asgi"``
    (inference through the ASGI app); both doors call the same edge.
    """

    def __init__(self, settings_data: dict[str, Any], *, door: str = "raw", **app_kwargs: Any) -> None:
        assert door in ("raw", "asgi"), door
        self.door = door
        self.settings = build_settings(settings_data)
        self.app = create_app(self.settings, **app_kwargs)
        self.thread = ServerThread.uvicorn(self.app, raw_door=door == "raw")

    @property
    def port(self) -> int:
        return self.thread.port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    def endpoint(self, name: str) -> Endpoint:
        """The live :class:`Endpoint` named ``name`` (read its state only)."""
        for endpoint in self.app.state.container.registry:
            if endpoint.name == name:
                return endpoint
        raise KeyError(name)

    def metrics_text(self) -> str:
        response = httpx.get(self.url + "/metrics", timeout=10)
        response.raise_for_status()
        return response.text

    def metric(self, name: str, **labels: str) -> float:
        return metric(self.metrics_text(), name, **labels)

    def start(self) -> RunningGateway:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.thread.stop()


def metric(text: str, name: str, **labels: str) -> float:
    """Sum of the samples called ``name`` whose labels include ``labels`` (0.0 if none)."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(key) == value for key, value in labels.items()):
                total += sample.value
    return total


def chat_body(content: str = "hi", **fields: Any) -> dict[str, Any]:
    """A minimal chat request body for model ``qwen-fast`` plus ``fields``."""
    body: dict[str, Any] = {"model": "qwen-fast", "messages": [{"role": "user", "content": content}]}
    body.update(fields)
    return body


def raw_request(port: int, path: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> socket.socket:
    """Send one HTTP/1.1 POST with a JSON body on a fresh socket and return the open socket."""
    payload = orjson.dumps(body)
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        f"Content-Length: {len(payload)}",
        *(f"{name}: {value}" for name, value in (headers or {}).items()),
    ]
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + payload)
    return sock


def read_until(sock: socket.socket, marker: bytes) -> bytes:
    """Bytes read from ``sock`` until ``marker`` arrives or the peer closes."""
    received = b""
    while marker not in received:
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    return received


def error_shape_ok(payload: Any) -> bool:
    """True if ``payload`` is exactly ``{"error": {"message", "type", "param", "code"}}``."""
    return (
        isinstance(payload, dict)
        and set(payload) == {"error"}
        and isinstance(payload["error"], dict)
        and set(payload["error"]) == {"message", "type", "param", "code"}
        and isinstance(payload["error"]["message"], str)
        and isinstance(payload["error"]["type"], str)
    )


def sse_data(raw: bytes | str) -> list[Any]:
    """The ``data`` payloads of an SSE body, JSON-decoded except the ``[DONE]`` sentinel."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    events: list[Any] = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(line[5:].removeprefix(" ") for line in block.split("\n") if line.startswith("data:"))
        if data:
            events.append(data if data == "[DONE]" else orjson.loads(data))
    return events


def streamed_text(raw: bytes | str) -> str:
    """The generated text of an OpenAI chat or completion stream (content deltas or ``text``)."""
    parts = []
    for event in sse_data(raw):
        if not isinstance(event, dict):
            continue
        for choice in event.get("choices") or []:
            delta = choice.get("delta") or {}
            parts.append(delta.get("content") or choice.get("text") or "")
    return "".join(parts)
