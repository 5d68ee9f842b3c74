"""Servers and sockets for the security tier (``tests/security``): what an attacker would stand up.

:class:`Recorder` is a tiny OpenAI-compatible server (aiohttp) on any loopback address (Linux
routes all of 127.0.0.0/8 to loopback, so ``127.0.0.2`` stands for "an internal host outside
``admin.allowed_networks``") that records every request it gets. :func:`redirector` answers every
request with a 307 to another server. :func:`slow_socket` opens a raw client socket for the
slow-connection tests.
"""

from __future__ import annotations

import socket
from typing import Any

import orjson
from aiohttp import web

from tests.support.threads import ServerThread, free_port


def _serve(app: web.Application, host: str, port: int | None) -> ServerThread:
    async def serve(port_: int, ready: Any, stop: Any) -> None:
        runner = web.AppRunner(app, shutdown_timeout=0.5)
        await runner.setup()
        await web.TCPSite(runner, host, port_).start()
        ready.set()
        await stop.wait()
        await runner.cleanup()

    thread = ServerThread(serve)
    thread.port = port or free_port()
    return thread


class Recorder:
    """An endpoint on ``host:port`` that answers chat, ``/health`` and ``/metrics`` and records each request."""

    def __init__(self, name: str, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.name = name
        self.host = host
        self.requests: list[tuple[str, str]] = []  # (method, path), appended on the server's thread
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._any)
        self.thread = _serve(app, host, port)

    @property
    def port(self) -> int:
        return self.thread.port

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def paths(self, path: str) -> int:
        return sum(1 for _, seen in list(self.requests) if seen == path)

    async def _any(self, request: web.Request) -> web.Response:
        self.requests.append((request.method, request.path))
        await request.read()
        if request.path.endswith("/chat/completions"):
            body = {
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": f"from {self.name}"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
            return web.Response(body=orjson.dumps(body), content_type="application/json")
        if request.path == "/metrics":
            return web.Response(text="# no engine metrics\n")
        return web.Response(status=200)

    def start(self) -> Recorder:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.thread.stop()


def redirector(location_origin: str, host: str = "127.0.0.1") -> ServerThread:
    """A server answering every request with ``307 Location: location_origin + path`` (method kept)."""

    async def redirect(request: web.Request) -> web.Response:
        return web.Response(status=307, headers={"Location": location_origin + request.path_qs})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", redirect)
    return _serve(app, host, None)


def slow_socket(port: int, first: bytes = b"", timeout_s: float = 10.0) -> socket.socket:
    """A raw client socket to the gateway on loopback, having sent ``first``."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    if first:
        sock.sendall(first)
    return sock


def read_all(sock: socket.socket) -> bytes:
    """Everything the peer sends until it closes (or the socket's timeout)."""
    received = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return received
