"""Incremental Server-Sent Events framing, and an observer of OpenAI completion streams.

kvgate relays stream bytes exactly as they come; this module only *watches* them. Framing follows
the WHATWG HTML "server-sent events" parsing rules as far as OpenAI streams use them: events are
separated by a blank line (``\\n\\n``, ``\\r\\n\\r\\n`` or ``\\r\\r``), ``data:`` lines of one event
are joined with ``\\n``, other fields and comments (``:``) are ignored. An event may be split
across any number of reads, and one read may hold many events.

:class:`StreamObserver` reads OpenAI chunks (``chat.completion.chunk`` / ``text_completion``) to
learn the time of the first token (for TTFT), ``usage`` (the final chunk when
``stream_options.include_usage``), finish reasons, the ``[DONE]`` sentinel, and an in-band
``{"error": ...}`` event, which vLLM sends with HTTP 200 when its engine dies mid-stream. It also
tells when the stream *started* (:attr:`StreamObserver.started`): the first event that is neither a
comment (``: keep-alive``) nor a role-only chunk, so that the proxy can hold such a preamble and
still fail over invisibly.

:func:`without_usage` removes the usage kvgate asked for on behalf of a client that did not.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import orjson

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")
_MAX_PENDING = 4 * 1024 * 1024
MAX_COLLECTED_CHARS = 256 * 1024  # generated text kept for a continuation (~64k tokens); longer: not continued
_COMPACT_EVERY = 256  # join the collected pieces this often (one str per token costs ~60 bytes)
_USAGE_NULL = re.compile(rb',\s*"usage"\s*:\s*null|"usage"\s*:\s*null\s*,?')


class SSEDecoder:
    """Splits a byte stream into the ``data`` payloads of complete events.

    ``feed(chunk)`` returns the data of every event completed by ``chunk`` (bytes, without the
    ``data:`` prefix; multi-line data joined by ``\\n``). An event still open waits for more
    input. A pending event larger than 4 MiB is dropped (the observer then misses it; the relay
    is unaffected).
    """

    __slots__ = ("_pending",)

    def __init__(self) -> None:
        self._pending = b""

    @property
    def pending(self) -> bool:
        """True while an event has started but not ended."""
        return bool(self._pending.strip())

    def feed(self, chunk: bytes) -> list[bytes]:
        return [data for _, data in self.split(chunk) if data is not None]

    def split(self, chunk: bytes) -> list[tuple[bytes, bytes | None]]:
        """Every event completed by ``chunk``: (its raw bytes with the terminator, its data or None)."""
        buffer = self._pending + chunk if self._pending else chunk
        events: list[tuple[bytes, bytes | None]] = []
        start = 0
        for match in _EVENT_END.finditer(buffer):
            events.append((buffer[start : match.end()], _event_data(buffer[start : match.start()])))
            start = match.end()
        rest = buffer[start:]
        self._pending = rest if len(rest) <= _MAX_PENDING else b""
        return events


def _event_data(block: bytes) -> bytes | None:
    lines = []
    for line in block.splitlines():
        if line.startswith(b"data:"):
            value = line[5:]
            lines.append(value[1:] if value.startswith(b" ") else value)
    if not lines:
        return None
    return b"\n".join(lines)


def split_observed(
    decoder: SSEDecoder, observe: Callable[[bytes], dict[str, Any] | None], chunk: bytes, every: bool
) -> list[tuple[bytes, dict[str, Any] | None]]:
    """``chunk``'s complete events as (raw bytes, parsed object or None), each one's data given to
    ``observe`` (which returns it parsed); the object is kept only for events with ``usage`` or
    ``error`` unless ``every``. Shared by every API's stream observer."""
    events = []
    for raw, data in decoder.split(chunk):
        event = observe(data) if data is not None else None
        if event is not None and not every and "usage" not in event and "error" not in event:
            event = None
        events.append((raw, event))
    return events


class StreamObserver:
    """Watches an OpenAI SSE stream without changing it.

    Attributes (read after or during the stream):
        first_token_at: clock reading at the first chunk carrying generated text, reasoning or a
            tool call (seconds, from the injected clock), or None.
        usage: the ``usage`` object of the stream, if any.
        finish_reasons: finish reasons seen, in order.
        error: the in-band ``error`` object, if one arrived (the request then failed).
        done: whether ``data: [DONE]`` arrived.
        events: number of data events seen.
    """

    __slots__ = (
        "_decoder", "_clock", "first_token_at", "usage", "finish_reasons", "error", "done", "events",
        "collect", "text", "output_events", "identity", "other_output", "started", "_collected",
    )

    def __init__(self, clock: Callable[[], float], *, collect: bool = False) -> None:
        self._decoder = SSEDecoder()
        self._clock = clock
        self.collect = collect  # keep the generated text (for a mid-stream continuation)
        self.text: list[str] = []
        self.output_events = 0  # events that carried generated output (about one token each)
        self.identity: dict[str, Any] | None = None  # id, created, model, object of the first chunk
        self.other_output = False  # reasoning, tool calls, several choices or too long: not continuable
        self._collected = 0  # characters in ``text``, at most MAX_COLLECTED_CHARS
        self.started = False  # an event beyond comments and role-only chunks arrived
        self.first_token_at: float | None = None
        self.usage: dict[str, Any] | None = None
        self.finish_reasons: list[str] = []
        self.error: dict[str, Any] | None = None
        self.done = False
        self.events = 0

    def reset_framing(self) -> None:
        """A new stream continues the answer: forget the abandoned one's partial event, its
        in-band error and its ``[DONE]`` (which may have arrived in the same read as the error)."""
        self._decoder = SSEDecoder()
        self.error = None
        self.done = False

    @property
    def has_partial_event(self) -> bool:
        """True if the bytes seen so far end inside an event."""
        return self._decoder.pending

    def feed(self, chunk: bytes) -> None:
        """Observe one relayed read. Never raises on malformed input."""
        for data in self._decoder.feed(chunk):
            self.observe_data(data)

    def split(self, chunk: bytes, *, every: bool = False) -> list[tuple[bytes, dict[str, Any] | None]]:
        """Observe ``chunk`` and return its complete events: (raw bytes, parsed JSON object or None).

        The parsed object is returned only for events with ``usage`` or ``error`` (None for the
        others, which were observed all the same), unless ``every``: a read of a fast stream
        holds thousands of events, and their dicts would cost ~1.5 KB each.
        """
        return split_observed(self._decoder, self.observe_data, chunk, every)

    def observe_data(self, data: bytes) -> dict[str, Any] | None:
        """Observe one event's data; return it parsed when it is a JSON object."""
        self.events += 1
        if data == b"[DONE]":
            self.done = self.started = True
            return None
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.started = True
            return None
        if not isinstance(event, dict):
            self.started = True
            return None
        self._observe(event)
        return event

    def _observe(self, event: dict[str, Any]) -> None:
        error = event.get("error")
        if error is not None:
            self.error = error if isinstance(error, dict) else {"message": str(error)}
            self.started = True
            return
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
            self.started = True
        choices = event.get("choices")
        if not isinstance(choices, list):
            self.started = True  # not a completion chunk: whatever it is, it is not a preamble
            return
        if self.identity is None:
            self.identity = {key: event.get(key) for key in ("id", "created", "model", "object")}
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            if _has_output(choice):
                self.started = True
                self.output_events += 1
                if self.first_token_at is None:
                    self.first_token_at = self._clock()
                if self.collect:
                    self._collect(choice)
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                self.started = True
                self.finish_reasons.append(reason)

    def _collect(self, choice: dict[str, Any]) -> None:
        if choice.get("index", 0) != 0:
            self.other_output = True
        delta = choice.get("delta")
        if isinstance(delta, dict):
            if delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls"):
                self.other_output = True
            content = delta.get("content")
        else:
            content = choice.get("text")
        if isinstance(content, str) and not self.other_output:
            self._collected += len(content)
            if self._collected > MAX_COLLECTED_CHARS:  # bounded memory: too long to continue
                self.other_output = True
                self.text = []
                return
            self.text.append(content)
            if len(self.text) >= _COMPACT_EVERY:
                self.text = ["".join(self.text)]


def _has_output(choice: dict[str, Any]) -> bool:
    if choice.get("text"):
        return True
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        return False
    return bool(
        delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls")
    )


def without_usage(raw: bytes, event: dict[str, Any] | None) -> bytes | None:
    """The event's bytes without the ``usage`` kvgate asked for; None to drop the event.

    A usage-only chunk (``choices: []``) is dropped; a chunk that also carries choices loses its
    ``usage`` member: ``"usage": null`` (OpenAI puts it in every chunk once usage is asked for) is
    cut out of the bytes, so what remains is byte for byte what the endpoint sends a client that
    did not ask; a non-null usage there is removed by re-serializing the event.
    """
    if event is None or "usage" not in event:
        return raw
    choices = event.get("choices")
    if isinstance(choices, list) and not choices:
        return None
    if event["usage"] is None:
        cut, found = _USAGE_NULL.subn(b"", raw)
        if found == 1:  # only the top-level member can be it (JSON strings escape their quotes)
            return cut
    rest = {key: value for key, value in event.items() if key != "usage"}
    return b"data: " + orjson.dumps(rest) + b"\n\n"
