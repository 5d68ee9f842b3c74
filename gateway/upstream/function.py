"""An in-process :class:`~gateway.upstream.client.Upstream` whose transport is a Python function.

httpx's ``MockTransport(handler)`` idea: a function is a transport. ``FunctionUpstream(handler)``
calls ``handler(request)`` (a :class:`FunctionRequest`; the handler may be async) for every
``post`` and ``probe`` and turns what it returns into an upstream response, so the director, the
attempt loop and the relay run end to end with no socket, no thread and no sleep.

What a handler may do, and what the gateway then sees:

* return a :class:`FunctionResponse`: its status and headers at once; its body as given: bytes
  (one read), a sequence of reads (``bytes`` items; an exception item is raised at that read, a
  break mid-body), or an async iterable of reads (it may await an event the test controls);
* raise :class:`~gateway.errors.UpstreamError` (connection refused, reset) or
  :class:`~gateway.errors.UpstreamTimeoutError` before the headers, as the real clients do.

Every request and response is recorded (``requests``, ``responses``) with whether the response
was closed (aborted) or released (returned to the pool): tests assert on both.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gateway.errors import UpstreamError

Body = bytes | Sequence[bytes | BaseException] | AsyncIterable[bytes]


@dataclass(slots=True)
class FunctionRequest:
    """One request as the handler sees it (``method``: ``POST`` or ``GET``; ``body`` empty for a probe)."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes = b""


@dataclass(slots=True)
class FunctionResponse:
    """What a handler answers (module doc). ``headers``: any case; looked up lower-cased."""

    status: int = 200
    body: Body = b""
    headers: Mapping[str, str] = field(default_factory=dict)


Handler = Callable[[FunctionRequest], "FunctionResponse | Awaitable[FunctionResponse]"]


class FunctionResponseStream:
    """The :class:`~gateway.upstream.client.UpstreamResponse` over a :class:`FunctionResponse`."""

    def __init__(self, request: FunctionRequest, answer: FunctionResponse) -> None:
        self.request = request
        self.status = answer.status
        self.headers = {name.lower(): value for name, value in answer.headers.items()}
        self.closed = False  # aborted (the endpoint would see a disconnect)
        self.released = False  # finished normally (the connection back to the pool)
        body = answer.body
        self._reads: AsyncIterator[bytes | BaseException] = _reads(body)

    async def next_chunk(self) -> bytes:
        """The next read, ``b""`` at the end (or once closed). Raises what the handler put in the body."""
        if self.closed:
            return b""
        try:
            chunk = await anext(self._reads)
        except StopAsyncIteration:
            return b""
        if isinstance(chunk, BaseException):
            raise chunk
        return chunk

    async def read(self) -> bytes:
        parts = []
        while chunk := await self.next_chunk():
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        self.closed = True

    def release(self) -> None:
        self.released = True


async def _reads(body: Body) -> AsyncIterator[bytes | BaseException]:
    if isinstance(body, bytes | bytearray):
        if body:
            yield bytes(body)
        return
    if isinstance(body, AsyncIterable):
        async for chunk in body:
            yield chunk
        return
    for item in body:
        yield item


class FunctionUpstream:
    """``Upstream`` over ``handler`` (module doc)."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self.requests: list[FunctionRequest] = []
        self.responses: list[FunctionResponseStream] = []

    async def _call(self, request: FunctionRequest) -> FunctionResponse:
        self.requests.append(request)
        answer = self._handler(request)
        if inspect.isawaitable(answer):
            answer = await answer
        if not isinstance(answer, FunctionResponse):
            raise UpstreamError(f"the handler answered {type(answer).__name__}, not a FunctionResponse")
        return answer

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], connect_timeout_s: float) -> FunctionResponseStream:
        request = FunctionRequest("POST", url, dict(headers), body)
        response = FunctionResponseStream(request, await self._call(request))
        self.responses.append(response)
        return response

    async def request(
        self, method: str, url: str, body: bytes, headers: Mapping[str, str], connect_timeout_s: float
    ) -> FunctionResponseStream:
        """As :meth:`post` with another HTTP ``method`` (``GET``, ``DELETE``)."""
        request = FunctionRequest(method, url, dict(headers), body)
        response = FunctionResponseStream(request, await self._call(request))
        self.responses.append(response)
        return response

    async def probe(self, url: str, timeout_s: float) -> int:
        return (await self._call(FunctionRequest("GET", url, {}))).status

    async def aclose(self) -> None:
        return None
