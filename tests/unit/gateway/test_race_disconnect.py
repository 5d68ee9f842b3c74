"""gateway/relay.py race_disconnect: a client that leaves cancels the work; an answer
that was ready but is not sent still gets its accounting (BufferedReply.settle)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.proxy import BufferedReply
from gateway.relay import ClientDisconnected, race_disconnect


class _Attempt:
    """Stands for the reply's attempt: settling ends it."""

    def __init__(self, settled: list[str]) -> None:
        self.settled = settled

    def succeeded(self, usage: Any = None, *, accepted: bool = False) -> None:
        self.settled.append("settled")


def _reply(settled: list[str]) -> BufferedReply:
    return BufferedReply(200, b"{}", "application/json", attempt=_Attempt(settled))


async def test_the_answer_comes_back_unsettled_when_the_client_stays() -> None:
    settled: list[str] = []

    async def work() -> BufferedReply:
        return _reply(settled)

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(10)
        return {"type": "http.disconnect"}

    reply = await race_disconnect(work(), receive)
    assert settled == []  # the caller settles once it has written the answer
    reply.settle()
    reply.settle()
    assert settled == ["settled"]


async def test_an_answer_ready_but_not_sent_is_settled_when_the_client_left() -> None:
    """The work swallows the cancellation (as redis-py's pipeline can) and returns its answer anyway."""
    settled: list[str] = []
    left = asyncio.Event()

    async def work() -> BufferedReply:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            pass
        return _reply(settled)

    async def receive() -> dict[str, Any]:
        await left.wait()
        return {"type": "http.disconnect"}

    racing = asyncio.create_task(race_disconnect(work(), receive))
    await asyncio.sleep(0.01)
    left.set()
    with pytest.raises(ClientDisconnected):
        await racing
    assert settled == ["settled"]


async def test_a_request_task_cancelled_as_the_answer_completes_still_settles_it() -> None:
    settled: list[str] = []
    ready = asyncio.Event()

    async def work() -> BufferedReply:
        await ready.wait()
        return _reply(settled)

    async def receive() -> dict[str, Any]:
        await asyncio.sleep(10)
        return {"type": "http.disconnect"}

    racing = asyncio.create_task(race_disconnect(work(), receive))
    await asyncio.sleep(0.01)
    ready.set()
    await asyncio.sleep(0)  # the work finishes in this turn ...
    racing.cancel()  # ... and the request is cancelled before race_disconnect sees it
    with pytest.raises(asyncio.CancelledError):
        await racing
    assert settled == ["settled"]
