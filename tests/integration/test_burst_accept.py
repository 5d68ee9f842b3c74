"""A burst of new connections is accepted in one loop turn (``gateway/api/accept.py``).

Real listening sockets on loopback, real client sockets, the real loops (uvloop, which kvgate
serves on, and asyncio's). The clients connect while the server's loop is not running (the
kernel completes the handshakes into the accept queue), then the loop gets a fixed number of
turns: with the acceptor every queued connection has reached its protocol; without it, uvloop
(libuv since libuv/libuv#3696) has accepted about one per turn.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvloop

from gateway.api.accept import BurstAcceptor
from tests.support.loopback import until

CLIENTS = 64
TURNS = 10


class Counting(asyncio.Protocol):
    made: list[Counting] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        Counting.made.append(self)
        self.transport = transport


def _listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    sock.setblocking(False)
    return sock


async def _closed(clients: list[socket.socket], server: asyncio.AbstractServer | None = None) -> None:
    """Close the test's client sockets, the connections the server side made, and the server."""
    for client in clients:
        client.close()
    for protocol in Counting.made:
        protocol.transport.close()
    if server is not None:
        server.close()
        await server.wait_closed()


def _run(loop_kind: str, scenario: Callable[[], Awaitable[Any]]) -> Any:
    Counting.made = []
    if loop_kind == "uvloop":
        return uvloop.run(scenario())
    return asyncio.run(scenario())


async def _accepted_after_turns(with_acceptor: bool) -> tuple[int, int]:
    """(connections that reached a protocol after TURNS loop turns, of them the acceptor's)."""
    loop = asyncio.get_running_loop()
    listen = _listening()
    server = await loop.create_server(Counting, sock=listen, backlog=1024)
    acceptor = BurstAcceptor(loop, server.sockets, Counting) if with_acceptor else None
    port = listen.getsockname()[1]
    clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(CLIENTS)]  # no loop turn meanwhile
    try:
        for _ in range(TURNS):
            await asyncio.sleep(0)
        made = len(Counting.made)
        await until(lambda: len(Counting.made) == CLIENTS, "every client accepted, however slowly")
        return made, acceptor.accepted if acceptor is not None else 0
    finally:
        if acceptor is not None:
            acceptor.close()
        await _closed(clients, server)


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_a_burst_of_connections_reaches_its_protocols_within_a_few_turns(loop_kind: str) -> None:
    made, by_acceptor = _run(loop_kind, lambda: _accepted_after_turns(with_acceptor=True))
    assert made == CLIENTS
    assert by_acceptor > 0  # each connection was accepted once: by the acceptor or the server's own watcher


def test_without_it_uvloop_accepts_about_one_connection_a_turn() -> None:
    """Why the acceptor exists: the same burst on uvloop alone is still being accepted after TURNS turns."""
    made, _ = _run("uvloop", lambda: _accepted_after_turns(with_acceptor=False))
    assert made < CLIENTS, made


def test_after_close_it_accepts_nothing_and_the_server_still_does() -> None:
    async def scenario() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        listen = _listening()
        server = await loop.create_server(Counting, sock=listen)
        acceptor = BurstAcceptor(loop, server.sockets, Counting)
        acceptor.close()
        acceptor.close()  # idempotent
        port = listen.getsockname()[1]
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(4)]
        try:
            await until(lambda: len(Counting.made) == 4, "the server's own accepts")
            return acceptor.accepted, listen.fileno()
        finally:
            await _closed(clients, server)

    accepted, fileno = _run("uvloop", scenario)
    assert accepted == 0 and fileno != -1  # the server's own socket was left open by close()


def test_out_of_descriptors_it_pauses_then_accepts_again(caplog: pytest.LogCaptureFixture) -> None:
    class RunsOut:
        """A listening socket whose first accept fails with EMFILE (a process out of descriptors)."""

        def __init__(self, sock: socket.socket) -> None:
            self.sock = sock
            self.calls = 0

        def fileno(self) -> int:
            return self.sock.fileno()

        def accept(self) -> tuple[socket.socket, Any]:
            self.calls += 1
            if self.calls == 1:
                raise OSError(errno.EMFILE, "Too many open files")
            return self.sock.accept()

    async def scenario() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        listen = _listening()
        acceptor = BurstAcceptor(loop, [], Counting, retry_s=0.05)
        client = socket.create_connection(listen.getsockname())
        flaky = RunsOut(listen)
        try:
            acceptor._on_readable(flaky)  # type: ignore[arg-type]  # as the loop calls it when readable
            assert acceptor.accepted == 0
            await until(lambda: acceptor.accepted == 1 and len(Counting.made) == 1, "the accept after the pause")
            return acceptor.accepted, flaky.calls
        finally:
            loop.remove_reader(listen.fileno())
            acceptor.close()
            await _closed([client])
            listen.close()

    with caplog.at_level(logging.WARNING, logger="kvgate.accept"):
        accepted, calls = _run("asyncio", scenario)
    assert accepted == 1 and calls >= 2
    assert any("Too many open files" in record.getMessage() for record in caplog.records)


def test_a_batch_must_take_at_least_one() -> None:
    async def scenario() -> None:
        BurstAcceptor(asyncio.get_running_loop(), [], Counting, batch=0)

    with pytest.raises(ValueError, match="batch must be >= 1"):
        _run("asyncio", scenario)
