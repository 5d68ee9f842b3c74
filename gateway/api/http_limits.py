"""What one client connection may cost the gateway: header size and count, and how long it may dawdle.

uvicorn's httptools protocol puts no bound on a request head (llhttp has none; httptools keeps a
header value in memory until it ends) and no timer on a connection until its first response, so
60 connections sending 16 MiB of unfinished headers took 1 GB of RSS, and a connection sending one
byte a second, an unfinished body, or nothing at all was held for good. :class:`LimitedHttpProtocol`
is that protocol with the limits of ``[server]`` (defaults after Envoy and nginx):

=====================  ========  =================================================================
setting                default   bound, and the answer past it
=====================  ========  =================================================================
``max_header_bytes``   60 KiB    request line + headers (Envoy ``max_request_headers_kb`` = 60):
                                 431, connection closed
``max_headers``        100       header fields (Envoy ``max_headers_count`` = 100): 431, closed
``header_timeout_s``   60 s      connection open (or a request's first byte) -> end of its headers
                                 (nginx ``client_header_timeout`` = 60 s): 408 and closed; a new
                                 connection that sent nothing is just closed
``body_timeout_s``     60 s      silence between two reads of a request body (nginx
                                 ``client_body_timeout`` = 60 s): 408 (closed only, once the answer
                                 has started)
``body_min_rate``      500 B/s   average rate of a body since its head ended, once it has been
``body_grace_s``       20 s      arriving for ``body_grace_s`` (Apache ``mod_reqtimeout``
                                 ``body=20,MinRate=500``): 408 as above; rate 0: off
``body_max_s``         0 (off)   how long a body may take to arrive in all, seconds: 408 as above
``keepalive_s``        5 s       idle keep-alive between requests (uvicorn's ``timeout_keep_alive``,
                                 kept; nginx ``keepalive_timeout`` is 75 s): closed
=====================  ========  =================================================================

Only the client's own slowness is timed: the body's clocks stand still while the gateway holds the
body back (it paused reading, flow control, or has not yet sent ``100 Continue``). The time held is
summed exactly (:class:`_TimedFlow`) and left out of ``body_min_rate`` and ``body_max_s`` (every
byte counts, held or not), and while a hold lasts only the silence check runs, so a verdict due just
after a hold may come up to ``body_timeout_s`` late, never early. A pipelined request's body, queued
behind the answers before it, is held too: its clocks start at the first check after it is served
(again up to ``body_timeout_s`` late), and nothing is written into the answer before it. No timer runs once a request is read, so a long healthy
stream (or a slow endpoint) is never cut. One timer serves a connection, armed at its nearest
deadline and re-armed when it fires, never per read: a body that comes with its head costs nothing,
and a body read in pieces one addition per read. Both doors (the raw inference door of
``api/server.py`` and the ASGI app) sit behind this protocol, so both are bounded.

kvgate has no WebSocket API: a WebSocket ``Upgrade`` (any method), or any ``Upgrade`` on a
request that is not ``GET``/``HEAD`` (whose body llhttp would stop parsing), gets 400 and the
connection is closed; an ``Upgrade: h2c`` on a ``GET`` is ignored and answered over HTTP/1.1.

An answer given before its request's body was read (a 413 for a body over ``max_body_bytes``, a
401 before ``100 Continue``, and this protocol's own 400, 431 and 501) ends the connection by a
**lingering close**
(:meth:`LimitedHttpProtocol.linger`, as nginx's ``lingering_close``): the answer and a FIN go
out, the rest of the body is read and dropped unparsed, and the connection closes when the client
closes its side or after :data:`LINGER_S`. Closing with the body unread would make the kernel reset
the connection, and a client that sends its whole body before it reads (most do) would lose the
answer to a failed send. A 408 closes at once: its client is the slow one.

The head is measured as it arrives: past ``max_header_bytes`` of an unfinished head the
connection is answered at once (at most one read, 256 KiB, is held beyond the limit), and a head
that completes within one read is measured exactly. Errors are OpenAI-shaped JSON, Anthropic-shaped
for a request under ``/v1/messages`` (as far as its target was read).
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol, RequestResponseCycle

from gateway.api.middleware import new_request_id
from gateway.config.server import CONNECTION_LIMITS
from gateway.errors import InvalidRequestError
from gateway.protocol import messages

KiB = 1024


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """The limits of one listener (see the module doc for units and defaults)."""

    max_header_bytes: int = 60 * KiB
    max_headers: int = 100
    header_timeout_s: float = 60.0
    body_timeout_s: float = 60.0
    body_min_rate: int = 500  # bytes/s; 0: off
    body_grace_s: float = 20.0
    body_max_s: float = 0.0  # 0: no cap

    @classmethod
    def of(cls, app: Any) -> HttpLimits:
        """The limits of ``app``'s ``[server]`` settings (defaults when it has none)."""
        try:
            server = app.state.container.settings.server
        except AttributeError:
            return cls()
        return cls(*(getattr(server, name) for name in CONNECTION_LIMITS))

    @property
    def first_body_check_s(self) -> float:
        """Seconds from a body's start (its head's end) to the first look at it: the nearest deadline."""
        first = self.body_timeout_s
        if self.body_min_rate:
            first = min(first, self.body_grace_s)
        if self.body_max_s:
            first = min(first, self.body_max_s)
        return first

    def body_left(self, client_s: float, received: int) -> tuple[float, str]:
        """Seconds of the client's time left before a body still arriving breaks a rate rule, and which.

        ``client_s``: seconds since the body's head ended, less the time the gateway held it back;
        ``received``: its bytes so far. The answer is ``(seconds, setting)``, where ``seconds <= 0``
        means the setting (``body_max_s`` or ``body_min_rate``) is broken now; ``(inf, "")`` when
        neither applies. While no byte arrives the answer only shrinks, so a timer armed at it is
        never late; a byte that arrives meanwhile only moves the deadline later.
        """
        left, setting = math.inf, ""
        if self.body_max_s:
            left, setting = self.body_max_s - client_s, "body_max_s"
        if self.body_min_rate:
            rate_left = max(self.body_grace_s, received / self.body_min_rate) - client_s
            if rate_left < left:
                left, setting = rate_left, "body_min_rate"
        return left, setting


class _TimedFlow(FlowControl):
    """uvicorn's read flow control that also sums how long the gateway held the current body back.

    ``held_at`` (loop clock, seconds) is set while the body is held (reading paused, or ``100
    Continue`` not yet sent: the first ``receive`` sends it, then resumes reading); ``held_s`` sums
    the holds that ended since :meth:`restart`. Whatever resumes reading ends a hold (an app's
    ``receive``, the end of a response), so an answer that never reads the body ends it too.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(transport)
        self._clock = loop.time
        self.held_s = 0.0
        self.held_at: float | None = None

    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            if self.held_at is None:
                self.held_at = self._clock()
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            self._transport.resume_reading()
        if self.held_at is not None:
            self.held_s += self._clock() - self.held_at
            self.held_at = None

    def restart(self, now: float, held: bool) -> None:
        """A new body starts at ``now`` (loop clock, s): nothing held yet, or held from now if ``held``."""
        self.held_s = 0.0
        self.held_at = now if held else None


class _Refused(Exception):
    """Raised from a parser callback to stop parsing a request that is answered with an error."""


def _error(status: int, code: str, message: str, path: bytes = b"") -> bytes:
    """A complete ``status`` answer that closes the connection: OpenAI's error shape, or Anthropic's
    (``{"type": "error", "error": {...}}`` and a ``request-id`` header) for a request under
    ``/v1/messages`` (``path``: the request target as far as it was read, query included)."""
    error = InvalidRequestError(message, code=code)
    error.status = status
    request_id = new_request_id()
    target = path.split(b"?", 1)[0].decode("latin-1")
    if target and messages.owns_path(target):
        body, extra = messages.error_body(error), b"\r\nrequest-id: " + request_id
    else:
        body, extra = error.body(), b""
    return b"".join((
        STATUS_LINE[status], b"content-type: application/json\r\ncontent-length: ", str(len(body)).encode(),
        b"\r\nx-request-id: ", request_id, extra, b"\r\nconnection: close\r\n\r\n", body,
    ))


LINGER_S = 5.0
"""Seconds a lingering close waits for the client to finish sending and close (nginx's
``lingering_timeout`` default) before it closes anyway."""
_NO_UPGRADE = "kvgate serves HTTP/1.1 only: no WebSocket and no protocol upgrade on a request with a body."
_STALLED = {
    "body_timeout_s": "The request body stalled (server.body_timeout_s).",
    "body_min_rate": "The request body arrived too slowly: under {0.body_min_rate} bytes/s on average after "
    "{0.body_grace_s} s (server.body_min_rate, server.body_grace_s).",
    "body_max_s": "The request body did not arrive within {0.body_max_s} s (server.body_max_s).",
}
_CODING = ("Transfer-Encoding {!r} is not supported: kvgate reads only 'chunked', alone and once "
           "(RFC 9112 6.1); send the body chunked or with a Content-Length.")
_TOO_LARGE = "Request header fields too large: at most {} bytes in {} fields (server.max_header_bytes, server.max_headers)."


class LimitedHttpProtocol(HttpToolsProtocol):
    """uvicorn's ``HttpToolsProtocol`` with :class:`HttpLimits` (see the module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits = HttpLimits.of(self.config.app)
        self._in_head = True  # between the end of one request and the headers of the next
        self._head_started = False  # the current head's first byte arrived
        self._head_since = 0.0
        self._head_bytes = 0  # bytes received while in the head (an upper bound of its size)
        self._head_exact = 0  # request line + header fields, as parsed
        self._header_count = 0
        self._last_read = 0.0
        self.url = b""  # uvicorn sets it at each request's first byte; read by the errors before one
        self._body_since = 0.0  # loop time the current body's head ended
        self._body_bytes = 0  # bytes read since then (the head's read counted by what it held of the body)
        self._flow: _TimedFlow = None  # type: ignore[assignment]
        self._timer: asyncio.TimerHandle | None = None
        self._refusal: bytes | None = None

    # -- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.flow = self._flow = _TimedFlow(transport, self.loop)
        self._head_since = self.loop.time()
        self._arm(self.limits.header_timeout_s)  # a new connection must send a request head in time

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refusal is not None:
            return
        self._unset_keepalive_if_required()
        self._last_read = self.loop.time()
        if self._in_head:
            self._head_bytes += len(data)
        else:
            self._body_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserUpgrade, httptools.HttpParserError) as stop:
            self._parsing_stopped(stop)
            return
        if self._in_head:
            if self._head_started:
                if self._head_bytes > self.limits.max_header_bytes:
                    self._refuse(self._too_large())
                elif self._timer is None:
                    self._arm(self.limits.header_timeout_s)
        elif self._timer is None and self.cycle is not None and self.cycle.more_body:
            self._start_body(self.cycle)  # the body is still coming

    def _parsing_stopped(self, stop: Exception) -> None:
        """The parser stopped on ``stop``: an upgrade (uvicorn's handling), a refusal, or bad HTTP (400)."""
        if isinstance(stop, httptools.HttpParserUpgrade):
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        elif self._refusal is not None:
            self._refuse(self._refusal)
        else:
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")

    # -- parser callbacks ----------------------------------------------------------------------
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_started = True
        self._head_since = self.loop.time()
        self._head_exact = 0
        self._header_count = 0

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._head_exact += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        self._head_exact += len(name) + len(value) + 4  # ": " and CRLF
        if self._header_count > self.limits.max_headers:
            self._refusal = self._too_large()
            raise _Refused()
        # RFC 9112 6.1: only chunked, else 501 (chunked twice or beside Content-Length: the parser's 400)
        if name.lower() == b"transfer-encoding" and value.strip().lower() != b"chunked":
            self._refusal = _error(501, "unsupported_transfer_coding", _CODING.format(value[:100].decode("latin-1")), self.url)
            raise _Refused()
        super().on_header(name, value)

    def check_head(self) -> None:
        """At the end of a request head: refuse it past ``max_header_bytes``, else stop its timer.

        Called first by every ``on_headers_complete`` (a subclass serving some requests itself
        calls it too); idempotent. Raises _Refused (the parser stops; the 431 is written).
        """
        if self._head_exact > self.limits.max_header_bytes:
            self._refusal = self._too_large()
            raise _Refused()
        if self.parser.should_upgrade() and (
            self._get_upgrade() == b"websocket" or self.parser.get_method() not in (b"GET", b"HEAD")
        ):
            self._refusal = _error(400, "upgrade_not_supported", _NO_UPGRADE, self.url)
            raise _Refused()
        self._in_head = False
        self._head_bytes = 0
        self._disarm()

    def on_headers_complete(self) -> None:
        self.check_head()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._in_head = True
        self._head_started = False
        self._disarm()
        super().on_message_complete()

    # -- timers and answers --------------------------------------------------------------------
    def _too_large(self) -> bytes:
        limits = self.limits
        return _error(431, "request_header_fields_too_large", _TOO_LARGE.format(limits.max_header_bytes, limits.max_headers), self.url)

    def _start_body(self, cycle: RequestResponseCycle) -> None:
        """Time the body of the request whose head ended in this read: the first read left without a timer."""
        now = self._body_since = self._last_read
        self._body_bytes = self._buffered(cycle)  # what this read held of it (the app has not run yet)
        self._flow.restart(now, self._flow.read_paused or cycle.waiting_for_100_continue)
        self._arm(self.limits.first_body_check_s)

    def _buffered(self, cycle: RequestResponseCycle) -> int:
        """Body bytes ``cycle`` holds that its app has not taken yet."""
        return len(cycle.body)

    def _arm(self, delay_s: float) -> None:
        self._disarm()
        self._timer = self.loop.call_later(delay_s, self._on_timer)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        now = self.loop.time()
        if self._in_head:
            left = self._head_since + self.limits.header_timeout_s - now
            if left > 0:
                self._arm(left)
            elif self._head_started:
                self._refuse(_error(408, "request_timeout", "The request headers did not arrive in time (server.header_timeout_s).",
                                    self.url), linger=False)
            elif self.cycle is None:  # a new connection that never sent a byte
                self.transport.close()
            return
        cycle = self.cycle
        if cycle is not None and cycle.more_body:
            self._check_body(cycle, now)

    def _check_body(self, cycle: RequestResponseCycle, now: float) -> None:
        """The timer on a body still arriving: arm it again at the nearest deadline, or answer 408."""
        limits = self.limits
        flow = self._flow
        # the gateway's turn, not the client's (the rest of a body sent after the answer is the client's):
        # reading paused, 100 Continue not yet sent, or queued behind the answers to pipelined requests
        queued = bool(self.pipeline)
        held = not cycle.response_complete and (flow.read_paused or cycle.waiting_for_100_continue or queued)
        if held:
            self._last_read = now
        if queued:  # its clocks start when it is served (at the latest, at the first check after)
            self._body_since = now
            flow.restart(now, flow.held_at is not None)
        left, setting = self._last_read + limits.body_timeout_s - now, "body_timeout_s"
        if left > 0 and not held and flow.held_at is None and (limits.body_min_rate or limits.body_max_s):
            # during a hold the client's clock stands still: only the silence check runs until it ends
            client_left, rule = limits.body_left(now - self._body_since - flow.held_s, self._body_bytes)
            if client_left < left:
                left, setting = client_left, rule
        if left > 0:
            self._arm(left)
        elif cycle.response_started:
            self.transport.close()
        else:
            self._refuse(_error(408, "request_timeout", _STALLED[setting].format(limits), cycle.scope.get("raw_path") or b""),
                         linger=False)

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request llhttp cannot parse, in OpenAI's error shape (JSON), then close."""
        self._refuse(_error(400, "invalid_http_request", f"{msg} kvgate could not parse it as HTTP/1.1.", self.url))

    def linger(self) -> None:
        """Close after an answer given before the request's body was read, without a reset (module doc):
        the write side now (once what is written has gone), the connection when the client closes
        its side or after :data:`LINGER_S`; what arrives meanwhile is dropped unparsed."""
        transport = self.transport
        if transport.is_closing():
            return
        if not transport.can_write_eof():
            transport.close()
            return
        if self._refusal is None:
            self._refusal = b""  # data_received drops every later byte: no request after this one
        self._disarm()
        transport.write_eof()
        self._flow.resume_reading()
        self._timer = self.loop.call_later(LINGER_S, transport.close)  # connection_lost cancels it

    def on_response_complete(self) -> None:
        cycle = self.cycle
        if cycle is not None and cycle.more_body and not cycle.keep_alive:  # answered before its body was read
            self.linger()  # (a no-op once the transport closes, as uvicorn's own cycle does)
        if self._refusal is not None:  # lingering or refused: no keep-alive timer, no next request
            self.server_state.total_requests += 1
            return
        super().on_response_complete()

    def _refuse(self, answer: bytes, *, linger: bool = True) -> None:
        """Write ``answer`` (a complete response) and close, by a lingering close (:meth:`linger`: the
        client may still be sending) unless ``linger`` is false (a 408: the client is the slow one);
        a request being served sees a disconnect."""
        self._refusal = answer
        self._disarm()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.response_started = True  # nothing else is written on this connection
            cycle.disconnected = True
            cycle.message_event.set()
        if not self.transport.is_closing():
            self.transport.write(answer)
            if linger:
                self.linger()
            else:
                self.transport.close()
