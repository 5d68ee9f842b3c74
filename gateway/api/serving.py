"""[io] The HTTP server ``kvgate serve`` and ``kvgate up`` run: uvicorn's, with kvgate's signal
handling, burst accept and garbage-collector tuning."""

from __future__ import annotations

import contextlib
import gc
import socket
import time
from collections.abc import Iterator

import uvicorn

from gateway.api.accept import BurstAcceptor, for_server


def tune_gc(young_threshold: int = 50_000) -> None:
    """Keep the cyclic garbage collector off the request path of a serving process.

    Measured under ``bench/overhead`` (c=32, one core, gc.callbacks timing every collection):
    with CPython's defaults a young-generation collection ran every ~20 requests (objects of
    in-flight requests are alive when it runs) and took ~140 us, and each full collection walked
    the ~100k objects built at start-up (modules, settings, the app) for 60-75 ms: about 35 us of
    CPU per request on average and 50-60 ms stalls at p99. ``gc.freeze()`` moves everything alive
    after start-up to the permanent generation (never scanned; the approach CPython's ``gc`` docs
    recommend for pre-fork servers), and a young threshold of ``young_threshold`` allocations
    (default 700) lets refcounting free each request's objects before a collection sees them.
    Cyclic garbage is still collected, just less often.
    """
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young_threshold, middle, old)


REPEAT_GRACE_S = 1.0
"""Seconds after a first SIGINT/SIGTERM in which a repeat is the same stop, not "force exit":
GNU make forwards a process group's SIGTERM to its child, so ``make run`` gets it twice at once."""


class GatewayServer(uvicorn.Server):
    """uvicorn's server without its own signal handling (which re-raises the signal after
    shutdown), with the burst acceptor (``gateway/api/accept.py``) on its listening sockets and
    the garbage collector tuned (:func:`tune_gc`) once it has started."""

    force_on_repeat = True  # a second signal forces exit (not in a --processes child)
    repeat_grace_s = REPEAT_GRACE_S
    clock = staticmethod(time.monotonic)
    first_signal_at: float | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    acceptor: BurstAcceptor | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.should_exit:
            self.acceptor = for_server(self)
        tune_gc()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.acceptor is not None:
            self.acceptor.close()
        await super().shutdown(sockets=sockets)

    def request_exit(self) -> None:
        now = self.clock()
        if self.first_signal_at is None:
            self.first_signal_at = now
        elif self.force_on_repeat and now - self.first_signal_at >= self.repeat_grace_s:
            self.force_exit = True
        self.should_exit = True
