"""Small helpers for tests on loopback: a free TCP port, and polling a condition with a bound.

``until`` is for events with no awaitable signal (a socket's state, a counter another task
bumps). Its timeout is a bound so that a broken test fails instead of hanging, never a timing
assertion: it is set far above what the event needs on a loaded machine.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def until(condition: Callable[[], object], what: str, *, timeout_s: float = 10.0, every_s: float = 0.01) -> None:
    """Poll ``condition`` every ``every_s`` seconds until it is true.

    Raises:
        AssertionError: ``condition`` was still false after ``timeout_s`` seconds (names ``what``).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"never happened within {timeout_s:g} s: {what}")
        await asyncio.sleep(every_s)
