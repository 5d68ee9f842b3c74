"""How :class:`~gateway.upstream.connection.Connection` puts a request body on the socket.

A fake transport records each call: a small body goes out joined to the head in one ``write``;
a larger one beside the head in one ``writelines`` (a ``writev`` on uvloop: no copy of the body);
one over ``PIECE_BYTES`` in pieces of that size, a piece per loop turn. Whatever the size, the
bytes written are the head and the body exactly. (The integration tests send large bodies to a
real socket endpoint: ``tests/integration/test_native_upstream.py``.)
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.upstream.connection import JOIN_BYTES, PIECE_BYTES, Connection, Target


class RecordingTransport:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[bytes]]] = []

    def write(self, data: Any) -> None:
        self.calls.append(("write", [bytes(data)]))

    def writelines(self, parts: Any) -> None:
        self.calls.append(("writelines", [bytes(part) for part in parts]))

    def is_closing(self) -> bool:
        return False


class Pool:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def discard(self, conn: Connection) -> None: ...

    def forget(self, conn: Connection) -> None: ...

    def put_back(self, conn: Connection) -> None: ...


async def _send(body: bytes) -> tuple[list[tuple[str, list[bytes]]], bytes]:
    conn = Connection(Pool(asyncio.get_running_loop()), ("http", "127.0.0.1", 9))  # type: ignore[arg-type]
    transport = RecordingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]
    conn.send(b"POST", Target("http://127.0.0.1:9/v1/chat/completions"), {"content-type": "application/json"}, body)
    for _ in range(len(body) // PIECE_BYTES + 3):  # one piece per loop turn
        await asyncio.sleep(0)
    return transport.calls, b"".join(b"".join(parts) for _, parts in transport.calls)


@pytest.mark.parametrize(
    ("size", "kinds"),
    [
        (100, ["write"]),
        (JOIN_BYTES, ["write"]),
        (JOIN_BYTES + 1, ["writelines"]),
        (200_000, ["writelines"]),  # a 200 KB prompt: one system call
        (PIECE_BYTES, ["writelines"]),
        (PIECE_BYTES * 3 + 7, ["writelines", "write", "write", "write"]),
    ],
)
async def test_a_body_goes_out_whole_in_the_fewest_writes(size: int, kinds: list[str]) -> None:
    body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    calls, sent = await _send(body)
    assert [kind for kind, _ in calls] == kinds
    head, _, rest = sent.partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:9\r\n")
    assert f"Content-Length: {size}".encode() in head
    assert rest == body
    pieces = [len(b"".join(parts)) for _, parts in calls[1:]]
    assert all(piece <= PIECE_BYTES for piece in pieces)
