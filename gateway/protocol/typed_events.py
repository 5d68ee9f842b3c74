"""An observer of event streams whose events name their ``type`` (Responses, Anthropic Messages).

Chat and completion streams are watched by :class:`~gateway.protocol.sse.StreamObserver`; the
Responses API (``event: response.output_text.delta`` + ``data: {"type": ..., "sequence_number":
N}``) and Anthropic's Messages API (``event: content_block_delta`` + ``data: {"type": ...}``) are
watched by a subclass of :class:`TypedEventObserver`, which offers the same attributes and
methods the relay reads, so the relay moves their bytes untouched in the same way:

- ``started``: the first event that is not in the API's preamble (``PREAMBLE``: the events an
  endpoint sends before any content, e.g. ``response.created``); until then the relay may hold
  the bytes and still fail over invisibly;
- ``first_token_at`` (TTFT) and ``output_events`` (about one per token) from the content deltas;
- ``usage``: the API's usage *normalized to OpenAI's shape* (``prompt_tokens``,
  ``completion_tokens``, ``total_tokens``, ``prompt_tokens_details.cached_tokens``), so the
  close-out reads every API's usage as it reads chat's; :attr:`tokens` gives the
  :class:`~gateway.keys.pricing.TokenUsage` directly;
- ``done``: the API's terminal event arrived; ``error``: its in-stream error event arrived (an
  ``{"message", "type", "code"}`` object);
- :meth:`error_event`: the bytes of the API's own error event, for a stream that breaks after
  content (never a fake terminal event).

These streams are never continued mid-stream (``collect`` is always False and ``other_output``
True): continuation is a chat-completions feature.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import orjson

from gateway.keys.pricing import TokenUsage
from gateway.protocol.sse import SSEDecoder, split_observed


def openai_usage(tokens: TokenUsage) -> dict[str, Any]:
    """``tokens`` as an OpenAI ``usage`` object (what the close-out reads for every API)."""
    return {
        "prompt_tokens": tokens.input,
        "completion_tokens": tokens.output,
        "total_tokens": tokens.input + tokens.output,
        "prompt_tokens_details": {"cached_tokens": tokens.cached},
    }


def count(value: Any) -> int:
    """A token count: a non-negative int, anything else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


class TypedEventObserver:
    """Watches a ``type``-tagged SSE stream without changing it (see the module docstring).

    Subclasses set ``PREAMBLE`` and implement :meth:`_observe_typed` and :meth:`error_event`.
    """

    PREAMBLE: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, clock: Callable[[], float], *, collect: bool = False) -> None:
        del collect  # never continued: see the module docstring
        self._decoder = SSEDecoder()
        self._clock = clock
        self.collect = False
        self.text: list[str] = []
        self.other_output = True
        self.identity: dict[str, Any] | None = None
        self.output_events = 0
        self.started = False
        self.first_token_at: float | None = None
        self.tokens: TokenUsage | None = None
        self.finish_reasons: list[str] = []
        self.error: dict[str, Any] | None = None
        self.done = False
        self.events = 0
        self.response_id: str | None = None  # the id the endpoint gave the answer (affinity key)

    @property
    def usage(self) -> dict[str, Any] | None:
        """The stream's usage in OpenAI's shape (:func:`openai_usage`), or None before it came."""
        return None if self.tokens is None else openai_usage(self.tokens)

    @property
    def has_partial_event(self) -> bool:
        """True if the bytes seen so far end inside an event."""
        return self._decoder.pending

    def reset_framing(self) -> None:
        """Forget a partial event (the relay's contract; these streams are not continued)."""
        self._decoder = SSEDecoder()

    def feed(self, chunk: bytes) -> None:
        """Observe one relayed read. Never raises on malformed input."""
        for data in self._decoder.feed(chunk):
            self.observe_data(data)

    def split(self, chunk: bytes, *, every: bool = False) -> list[tuple[bytes, dict[str, Any] | None]]:
        """Observe ``chunk``; its complete events as (raw bytes, parsed object or None).

        As :meth:`StreamObserver.split <gateway.protocol.sse.StreamObserver.split>`: the parsed
        object only for events carrying ``usage`` or ``error`` unless ``every``.
        """
        return split_observed(self._decoder, self.observe_data, chunk, every)

    def observe_data(self, data: bytes) -> dict[str, Any] | None:
        """Observe one event's data; return it parsed when it is a JSON object."""
        self.events += 1
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.started = True
            return None
        if not isinstance(event, dict):
            self.started = True
            return None
        kind = event.get("type")
        if not (isinstance(kind, str) and kind in self.PREAMBLE):
            self.started = True
        self._observe_typed(kind if isinstance(kind, str) else "", event)
        return event

    def _output(self) -> None:
        """One content delta: counts it and stamps the first token's time."""
        self.started = True
        self.output_events += 1
        if self.first_token_at is None:
            self.first_token_at = self._clock()

    def _observe_typed(self, kind: str, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def error_event(self, message: str) -> bytes:
        """The API's own error event for a stream broken after content (``message``: the cause)."""
        raise NotImplementedError

    def _separator(self) -> bytes:
        """A blank line to close a partial event the client already holds, before our event."""
        return b"\n\n" if self._decoder.pending else b""


def error_object(value: Any) -> dict[str, Any]:
    """An error event's payload as a dict with a ``message`` (whatever the endpoint sent)."""
    if isinstance(value, dict):
        return value if "message" in value else {**value, "message": orjson.dumps(value).decode()}
    return {"message": str(value)}
