"""The streaming relay: an ASGI response that passes an endpoint's SSE bytes through unchanged.

It owns the :class:`~gateway.attempt.Attempt` of the endpoint it reads from (its in-flight slot
and breaker probe), from the moment the director hands it over, and ends it exactly once, however
the stream ends: finished (``succeeded``), broken (``failed``), or client gone (``abandoned``).
A stream that may be continued elsewhere gets a :class:`~gateway.attempt.Continuation`: the
ranked endpoints and how to open the next stream.

Two relay modes:

* **raw** (the default): each upstream read is sent to the client as it came (no re-framing)
  and fed to a :class:`~gateway.protocol.sse.StreamObserver` that only watches (TTFT, usage,
  finish reasons, ``[DONE]``, in-band errors).
* **by event**, for streams that may be continued elsewhere (see ``gateway/continuation.py``)
  and streams whose usage kvgate asked for on a client's behalf: the bytes of each complete SSE
  event are sent unchanged as soon as the event is complete, so that an in-band
  ``{"error": ...}`` event can be held back and the answer finished on another endpoint, with the
  client seeing one stream, and the usage the client did not ask for is cut out
  (:func:`~gateway.protocol.sse.without_usage`): the client's bytes are those the endpoint
  sends a client that did not ask, ``[DONE]`` included.

**The preamble is held** (:func:`~gateway.attempt.hold_preamble`): before the relay starts, the director reads until
the first event that is more than an SSE comment or a role-only chunk (content, a finish reason,
usage, an error, ``[DONE]``), at most ``MAX_HELD_BYTES``; nothing is sent to the client before,
so a stream that fails during its preamble fails over invisibly.

**Usage.** When a stream ends without ``usage`` (an endpoint that does not take
``stream_options``, or a stream that broke), the exchange is given an estimate instead, marked
``"estimated": true``: the prompt tokens the director estimated (4 bytes per token, as TPM
reservations do) and one completion token per output event (as vLLM streams them).

**Memory per stream** (a client that reads nothing): the client's socket and transport buffers
fill, then ``send`` waits (uvicorn's flow control), the relay stops reading, and the endpoint's
connection pauses at 256 KiB (``gateway/upstream/native.py``). What a stream holds beyond that
is bounded: the held preamble (64 KiB), one partial SSE event (4 MiB, ``gateway/protocol/sse.py``)
and the text kept for a continuation (256 Ki characters, then the stream is no longer continued).

Every gap between two chunks is bounded by the route's ``idle_s``. The relay runs in the
request's own task (the first chunk follows the headers without a turn of the event loop); while
it relays, a second task waits for the client's ``http.disconnect`` and cancels the request's
task when it comes (a cancel from anywhere else stays a cancel); a disconnect aborts the upstream
request (the engine stops generating) and ends the request as ``cancelled``, never as an
endpoint failure. A stream cancelled or broken after its first token was sent keeps its TTFT.

How a stream ends, as the client sees it:
    * the endpoint finished with ``[DONE]``: relayed; ``success`` (or ``upstream_error`` if an
      in-band error event was relayed: a failure whatever the HTTP status said).
    * the endpoint broke after every choice's ``finish_reason`` was relayed (only the trailing
      usage chunk and ``[DONE]`` missing): the answer is whole, so kvgate ends the stream with
      ``[DONE]``, never continues it (that would repeat its end); ``success``, the endpoint's
      attempt a failure, usage estimated unless it came. A client that asked for usage gets no
      usage chunk then (only the endpoint could count it).
    * the endpoint broke, went silent, or ended without ``[DONE]``: continued on another
      endpoint when allowed; otherwise kvgate appends one OpenAI-format error event and closes,
      never a fake ``finish_reason`` or ``[DONE]``; ``upstream_error``. Another API's stream
      (Responses, Messages: its observer has ``error_event``) ends with that API's own error
      event instead (``response.failed``, ``event: error``).

``on_success``: called with the observer once a stream has succeeded (the Responses director
records the ids of the terminal response there, ``gateway/api_director.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson

from gateway.attempt import Continuation, Upstreamed
from gateway.continuation import ContinuationRewriter
from gateway.deadlines import deadline
from gateway.errors import GatewayError
from gateway.exchange import CANCELLED, SUCCESS, UPSTREAM_ERROR, Exchange
from gateway.protocol.sse import StreamObserver, without_usage

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

log = logging.getLogger("kvgate.relay")

_STEP = 64 * 1024  # the relay by event splits, observes and sends a read this much at a time


async def wait_for_disconnect(receive: Receive) -> None:
    """Return when the client has disconnected (call only after the request body was read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _cancel_on_disconnect(receive: Receive, task: asyncio.Task[Any], left: list[bool]) -> None:
    """Cancel ``task`` (once) when the client has disconnected, noting it in ``left`` first.

    A ``receive`` that fails (the server's connection broke) counts as the client leaving: it is
    logged, and ``task`` is cancelled all the same, so no relay outlives its connection.
    """
    try:
        await wait_for_disconnect(receive)
    except Exception as error:  # noqa: BLE001  # the connection is gone either way
        log.warning("reading the client's connection failed (%r): ending the stream", error)
    left.append(True)
    task.cancel()


class ClientDisconnected(Exception):
    """The client went away before the answer was ready."""


async def race_disconnect(work: Awaitable[Any], receive: Receive) -> Any:
    """Await ``work``, cancelling it if the client disconnects first.

    Raises:
        ClientDisconnected: the client left; ``work`` was cancelled.
    """
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(wait_for_disconnect(receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        _settle_unsent(task)
        raise
    finally:
        watcher.cancel()
    if not task.done():
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        _settle_unsent(task)
        raise ClientDisconnected()
    return task.result()


def _settle_unsent(task: asyncio.Future[Any]) -> None:
    """A buffered answer that was ready but will not be sent still gets its accounting
    (``BufferedReply.settle``: prefix commit, breaker, exchange end), as if it had been sent."""
    if task.done() and not task.cancelled() and task.exception() is None:
        settle = getattr(task.result(), "settle", None)
        if settle is not None:
            settle()


class _Broken(Exception):
    def __init__(self, reason: str, message: str, raw: bytes | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.raw = raw  # the endpoint's own in-band error event, relayed if nothing can continue


class StreamRelay:
    """ASGI response relaying an open upstream SSE stream; built by the director.

    ``source``: the open stream and its attempt (ended here, once); ``continuation``: how to go on
    elsewhere when it breaks (None: never continued); ``idle_s``: the longest gap between two
    reads (seconds); ``prompt_tokens``: the prompt's estimate, for a stream that reports no usage;
    ``choices``: how many choices an OpenAI stream carries (its ``n``): a stream that breaks after
    each has its ``finish_reason`` is ended with ``[DONE]`` (0: never, for other APIs' streams).
    """

    __slots__ = (
        "_source", "_observer", "_exchange", "_idle_s", "_continuation", "_tried", "_rewriter", "_prompt_tokens", "headers",
        "on_success", "_sending", "_choices",
    )

    def __init__(
        self,
        *,
        source: Upstreamed,
        observer: StreamObserver,
        exchange: Exchange,
        idle_s: float,
        continuation: Continuation | None = None,
        prompt_tokens: int = 0,
        choices: int = 0,
    ) -> None:
        self._source: Upstreamed | None = source
        self._observer = observer
        self._exchange = exchange
        self._idle_s = idle_s
        self._continuation = continuation
        self._tried: set[str] = {source.endpoint.name}
        self._rewriter: ContinuationRewriter | None = None
        self._prompt_tokens = prompt_tokens  # estimated, for when the endpoint reports no usage
        self.headers: list[tuple[bytes, bytes]] = []
        self.on_success: Callable[[Any], None] | None = None  # called with the observer when the stream succeeded
        self._choices = choices  # OpenAI SSE: the answer's choices (``n``); 0: another API, never ended on a break
        self._sending = False  # the headers went out and the relay began: the held preamble is sent next

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": 200, "headers": self._start_headers()})
            task = asyncio.current_task()
            assert task is not None
            left: list[bool] = []  # the watcher saw the client leave (and cancelled ``task`` once)
            watcher = asyncio.ensure_future(_cancel_on_disconnect(receive, task, left))
            taken_back = False  # the watcher's cancel (if it came) has been uncancelled
            self._sending = True
            try:
                await self._relay(send)  # in this task: no task and no loop turn between the headers and the first chunk
            except asyncio.CancelledError:
                if not left:
                    raise
                taken_back = True
                if task.uncancel() > 0:  # a cancel from elsewhere as well: it stays one
                    raise
                self._ended_as_client_left()
            except Exception as error:  # noqa: BLE001  # sending to the client failed: it is gone
                log.debug("relay ended by %r", error)
            finally:
                watcher.cancel()
                if left and not taken_back:  # the cancel came out as another exception, or not at all
                    task.uncancel()
        finally:
            self.abort()

    def _ended_as_client_left(self) -> None:
        """The client left: a stream that had already reached its end (the endpoint's last event
        read, with no error) is a success, as it would have been a loop turn earlier."""
        source = self._source
        observer = self._observer
        if source is not None and observer.done and observer.error is None and self._exchange.outcome is None:
            self._finish(source)

    def abort(self) -> None:
        """End the attempt if the relay never ran or was interrupted (idempotent): ``cancelled``, also
        when the client left while a continuation was being opened (no stream held then)."""
        source = self._take()
        if source is not None:
            source.response.close()
            source.attempt.abandoned()
        if self._exchange.outcome is None:
            self._exchange.finish(CANCELLED, usage=self._usage(), first_token_at=self._first_sent())

    def settle(self) -> None:
        """A stream made but never sent (the client left as it opened): end it as :meth:`abort` does."""
        self.abort()

    def _take(self) -> Upstreamed | None:
        source, self._source = self._source, None
        return source

    def _start_headers(self) -> list[tuple[bytes, bytes]]:
        assert self._source is not None
        content_type = self._source.response.headers.get("content-type", "text/event-stream")
        return [
            (b"content-type", content_type.encode("latin-1")),
            (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no"),
            *self.headers,
        ]

    async def _relay(self, send: Send) -> None:
        while True:
            source = self._source
            assert source is not None
            try:
                by_event = self._continuation is not None or source.strip_usage
                await (self._pump_events(send, source) if by_event else self._pump_raw(send, source))
            except _Broken as broken:
                self._fail(source, broken)
                if self._ended_before(broken, by_event):
                    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
                    self._exchange.finish(SUCCESS, usage=self._usage(), first_token_at=self._first_sent())
                    return
                if await self._continue():
                    continue
                closing = broken.raw if broken.raw is not None else self._error_event(broken.message)
                await send({"type": "http.response.body", "body": closing, "more_body": False})
                self._exchange.finish(UPSTREAM_ERROR, usage=self._usage(), first_token_at=self._first_sent())
                return
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            self._finish(source)
            return

    def _ended_before(self, broken: _Broken, by_event: bool) -> bool:
        """Whether the answer had ended when the stream broke: every choice's ``finish_reason`` was
        relayed and nothing but the trailing usage chunk and ``[DONE]`` can be missing (no in-band
        error, and no partial event relayed raw that ``[DONE]`` would follow)."""
        observer = self._observer
        if not self._choices or broken.raw is not None or observer.error is not None:
            return False
        if not by_event and observer.has_partial_event:
            return False
        return len(observer.finish_reasons) >= self._choices

    async def _next(self, source: Upstreamed) -> bytes:
        try:
            with deadline(self._idle_s):
                return await source.response.next_chunk()
        except TimeoutError:
            raise _Broken("idle_timeout", f"sent nothing for {self._idle_s:g} s") from None
        except GatewayError as error:
            raise _Broken("broken_stream", error.message) from None

    async def _pump_raw(self, send: Send, source: Upstreamed) -> None:
        observer = self._observer
        chunk = source.first
        while chunk:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            chunk = await self._next(source)
            observer.feed(chunk)
        if not observer.done and observer.error is None:
            raise _Broken("broken_stream", "closed the stream before it ended")

    async def _pump_events(self, send: Send, source: Upstreamed) -> None:
        observer = self._observer
        chunk = source.first
        if source.first_events is not None:  # the held preamble and the read that started the stream
            first, source.first_events = source.first_events, None
            await self._send_events(send, source, first)
            chunk = await self._next(source)
        while chunk:
            for start in range(0, len(chunk), _STEP):  # bounded work (and parsed events) per step
                piece = chunk if len(chunk) <= _STEP else chunk[start : start + _STEP]
                await self._send_events(send, source, observer.split(piece, every=self._rewriter is not None))
            chunk = await self._next(source)
        if not observer.done and observer.error is None:
            raise _Broken("broken_stream", "closed the stream before it ended")

    async def _send_events(self, send: Send, source: Upstreamed, events: list[tuple[bytes, dict[str, Any] | None]]) -> None:
        out = []
        for raw, event in events:
            if event is not None and event.get("error") is not None and self._continuation is not None:
                message = str(event["error"].get("message") if isinstance(event["error"], dict) else event["error"])
                if out:  # content that came in the same read as the error is the client's
                    await send({"type": "http.response.body", "body": b"".join(out), "more_body": True})
                raise _Broken("stream_error", f"in-band error: {message}", raw)
            outgoing = self._outgoing(raw, event, source.strip_usage)
            if outgoing is not None:
                out.append(outgoing)
        events.clear()  # nothing parsed stays alive while the client is slow to read
        if out:
            await send({"type": "http.response.body", "body": b"".join(out), "more_body": True})

    def _outgoing(self, raw: bytes, event: dict[str, Any] | None, strip_usage: bool) -> bytes | None:
        """The bytes the client gets for one event (None: nothing)."""
        if strip_usage and event is not None and "usage" in event:
            if self._rewriter is None:
                return without_usage(raw, event)
            choices = event.get("choices")
            if isinstance(choices, list) and not choices:
                return None
            event = {key: value for key, value in event.items() if key != "usage"}
        if self._rewriter is not None and event is not None:
            return self._rewriter.rewrite(event)
        return raw

    def _first_sent(self) -> float | None:
        """TTFT's end for a stream that did not succeed: the first token's time if the client was sent it.

        The held preamble ends at the first content event and is the relay's first write, right
        after the headers (no loop turn between): once the relay began, a first token seen was sent.
        A stream made but never relayed (the client left as it opened) has none.
        """
        return self._observer.first_token_at if self._sending else None

    def _usage(self) -> dict[str, Any] | None:
        """The stream's usage, or an estimate marked ``"estimated": true`` (module doc)."""
        usage = self._observer.usage
        if usage is not None:
            return usage
        prompt = self._prompt_tokens
        completion = self._observer.output_events
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion, "estimated": True}

    def _fail(self, source: Upstreamed, broken: _Broken) -> None:
        self._take()
        source.response.close()
        source.attempt.failed(broken.reason, broken.message)

    async def _continue(self) -> bool:
        if self._continuation is None:
            return False
        resumed = await self._continuation.next(self._observer, self._tried)
        if resumed is None:
            return False
        self._tried.add(resumed.endpoint.name)
        self._observer.reset_framing()  # a partial event of the broken stream was never sent
        self._source = resumed
        self._exchange.endpoint = resumed.endpoint.name
        self._exchange.continuations += 1
        # the observer keeps collecting: if this hop breaks too, the next one goes on from all the text sent
        self._rewriter = ContinuationRewriter(
            self._observer.identity, self._observer.output_events, self._exchange.continuations, resumed.endpoint.name
        )
        return True

    def _finish(self, source: Upstreamed) -> None:
        self._take()
        source.response.release()
        observer = self._observer
        if observer.error is not None:
            source.attempt.failed("stream_error", str(observer.error.get("message")))
            self._exchange.finish(UPSTREAM_ERROR, usage=self._usage(), first_token_at=self._first_sent())
            return
        source.attempt.succeeded(observer.usage)  # measured usage only
        self._exchange.finish(SUCCESS, usage=self._usage(), first_token_at=observer.first_token_at)
        if self.on_success is not None:
            self.on_success(observer)

    def _error_event(self, message: str) -> bytes:
        own = getattr(self._observer, "error_event", None)  # another API's own event (protocol/typed_events.py)
        if own is not None:
            return own(message)
        text = f"Upstream endpoint failed mid-stream: {message}."
        payload = {"error": {"message": text, "type": "server_error", "param": None, "code": "upstream_error"}}
        separator = b"\n\n" if self._observer.has_partial_event else b""
        return separator + b"data: " + orjson.dumps(payload) + b"\n\n"
