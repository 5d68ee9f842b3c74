"""Run a real HTTP server (uvicorn or aiohttp) on a free loopback port in a background thread."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn
from aiohttp import web

from gateway.api.server import uvicorn_config
from tests.support.loopback import free_port


class ServerThread:
    """A server in its own thread and event loop. ``start()`` returns once it accepts connections."""

    def __init__(self, serve: Callable[[int, asyncio.Event, asyncio.Event], Awaitable[None]]) -> None:
        self.port = free_port()
        self._serve = serve
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)
        self.error: BaseException | None = None

    @classmethod
    def uvicorn(cls, app: Any, *, raw_door: bool = True) -> ServerThread:
        """Serve ``app`` with kvgate's own protocol (``raw_door=False``: inference by the ASGI door)."""

        async def serve(port: int, ready: asyncio.Event, stop: asyncio.Event) -> None:
            # kvgate's own protocol (gateway/api/server.py), as `kvgate serve` runs it
            config = uvicorn_config(app, raw_door=raw_door, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
            server = uvicorn.Server(config)
            server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
            task = asyncio.create_task(server.serve())
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
            ready.set()
            await stop.wait()
            server.should_exit = True
            await task

        return cls(serve)

    @classmethod
    def aiohttp(cls, app: web.Application, **runner_kwargs: Any) -> ServerThread:
        """Serve an aiohttp app; ``runner_kwargs`` go to ``web.AppRunner`` (e.g. ``handler_cancellation``)."""

        async def serve(port: int, ready: asyncio.Event, stop: asyncio.Event) -> None:
            runner = web.AppRunner(app, shutdown_timeout=0.5, **runner_kwargs)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", port)
            await site.start()
            ready.set()
            await stop.wait()
            await runner.cleanup()

        return cls(serve)

    def _main(self) -> None:
        async def run() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            ready = asyncio.Event()
            task = asyncio.create_task(self._serve(self.port, ready, self._stop))
            waiter = asyncio.create_task(ready.wait())
            await asyncio.wait((task, waiter), return_when=asyncio.FIRST_COMPLETED)
            self._started.set()
            await task

        try:
            asyncio.run(run())
        except BaseException as error:  # surfaced by start()
            self.error = error
            self._started.set()

    def start(self, timeout_s: float = 20.0) -> None:
        self._thread.start()
        if not self._started.wait(timeout_s):
            raise RuntimeError("server did not start in time")
        if self.error is not None:
            raise RuntimeError(f"server failed to start: {self.error!r}")

    def call(self, fn: Callable[[], Any]) -> None:
        assert self._loop is not None
        self._loop.call_soon_threadsafe(fn)

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def wait_until(predicate: Callable[[], bool], timeout_s: float = 5.0, interval_s: float = 0.02) -> bool:
    """Poll ``predicate`` until true or ``timeout_s`` passes (for cross-thread state, not timing)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval_s)
    return predicate()
