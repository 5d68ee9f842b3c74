"""[io] Accept a burst of new client connections in one loop turn, not one per turn.

libuv (since 1.45, libuv/libuv#3696), and so uvloop, accepts a *single* connection each time a
listening socket polls readable and leaves the rest of the accept queue to the next turns of the
loop. On a busy gateway one turn runs every ready request (5-20 ms at saturation), so N clients
that connect at once wait up to N turns before their first request is even read, while the
requests of connections already open go on being served. Measured on this repository's 2-core
host (``bench.overhead``'s fake upstream, one gateway process saturated by 128 keep-alive
connections, then 128 new connections opened at once): the accept queue drained at 3-4
connections per 20 ms, the last new connection's first request waited 350-620 ms, and a 2 s
``wrk -c128`` run had p99 417-444 ms (max 630-670 ms) against 25 ms once every connection was
open. asyncio's own loop accepts up to ``backlog`` connections a turn and showed none of it, but
costs about 100 us more CPU per request (``gateway/cli.py``, ``_run``).

:class:`BurstAcceptor` watches a duplicate descriptor of each listening socket (the same socket,
so the same accept queue) and, when it is readable, accepts up to ``batch`` connections (default
128; asyncio's selector loop takes up to 100) and hands each to ``loop.connect_accepted_socket``
with the server's own protocol factory, so they get the same protocol class, HTTP limits
(``gateway/api/http_limits.py``) and TLS context as the connections the server accepts itself.
The server's watcher keeps accepting too; whichever of the two comes second gets ``EAGAIN``.
Under ``kvgate serve --processes N`` each process has its own ``SO_REUSEPORT`` queue, so a batch
takes nothing from the other processes. When ``accept`` fails otherwise (out of descriptors:
``EMFILE``/``ENFILE``, or out of memory), it logs a warning and stops watching for ``retry_s``
(0.1 s) instead of spinning on a queue it cannot drain; the server's own watcher goes on.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import socket
import ssl
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger("kvgate.accept")


class BurstAcceptor:
    """Accepts up to ``batch`` queued connections per readable event of each listening socket.

    ``listeners``: the server's listening sockets (anything with ``fileno()``; they stay the
    server's: only duplicates are watched, and closed by :meth:`close`); ``factory``: the
    server's protocol factory; ``tls``: its TLS context, or None.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        listeners: Iterable[Any],
        factory: Callable[[], asyncio.Protocol],
        *,
        tls: ssl.SSLContext | None = None,
        batch: int = 128,
        retry_s: float = 0.1,
    ) -> None:
        if batch < 1:
            raise ValueError(f"batch must be >= 1, got {batch}")
        self._loop = loop
        self._factory = factory
        self._tls = tls
        self._batch = batch
        self._retry_s = retry_s
        self._pending: set[asyncio.Task[Any]] = set()  # connect_accepted_socket calls under way
        self._closed = False
        self.accepted = 0  # connections this acceptor took from the queues (for tests and logs)
        self._socks: list[socket.socket] = []
        for listener in listeners:
            sock = socket.socket(fileno=os.dup(listener.fileno()))
            sock.setblocking(False)
            self._socks.append(sock)
            loop.add_reader(sock.fileno(), self._on_readable, sock)

    def _on_readable(self, sock: socket.socket) -> None:
        for _ in range(self._batch):
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return  # the queue is empty (or the server's own watcher took the last one)
            except ConnectionAbortedError:
                continue  # the client gave up while queued
            except OSError as error:  # EMFILE/ENFILE and the like: the queue cannot drain now
                log.warning("accepting a connection failed (%s): retrying in %g s", error, self._retry_s)
                self._loop.remove_reader(sock.fileno())
                self._loop.call_later(self._retry_s, self._rewatch, sock)
                return
            conn.setblocking(False)
            self.accepted += 1
            task = self._loop.create_task(self._connect(conn))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    def _rewatch(self, sock: socket.socket) -> None:
        if not self._closed:
            self._loop.add_reader(sock.fileno(), self._on_readable, sock)

    async def _connect(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._factory, conn, ssl=self._tls)
        except Exception as error:  # noqa: BLE001  # one client's failed handshake ends only that connection
            log.debug("an accepted connection could not start: %r", error)  # the loop has closed it

    def close(self) -> None:
        """Stop accepting (idempotent); connections already handed over are the server's."""
        if self._closed:
            return
        self._closed = True
        for sock in self._socks:
            self._loop.remove_reader(sock.fileno())
            sock.close()
        self._socks.clear()


def for_server(server: Any) -> BurstAcceptor:
    """A :class:`BurstAcceptor` on a started ``uvicorn.Server``'s listening sockets, with the
    protocol factory uvicorn's ``startup`` gives its own servers (same class, state and TLS)."""
    config = server.config
    factory = functools.partial(
        config.http_protocol_class, config=config, server_state=server.server_state, app_state=server.lifespan.state
    )
    listeners = [sock for each in server.servers for sock in (each.sockets or ())]
    return BurstAcceptor(asyncio.get_running_loop(), listeners, factory, tls=config.ssl)
