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
``keepalive_s``        5 s       idle keep-alive between requests (uvicorn's ``timeout_keep_alive``,
                                 kept; nginx ``keepalive_timeout`` is 75 s): closed
=====================  ========  =================================================================

Only the client's own slowness is timed: the body timer stands still while the gateway has paused
reading (flow control) or has not yet sent ``100 Continue``, and no timer runs once a request is
read, so a long healthy stream (or a slow endpoint) is never cut. Both doors (the raw inference
door of ``api/server.py`` and the ASGI app) sit behind this protocol, so both are bounded.

kvgate has no WebSocket API: a WebSocket ``Upgrade`` (any method), or any ``Upgrade`` on a
request that is not ``GET``/``HEAD`` (whose body llhttp would stop parsing), gets 400 and the
connection is closed; an ``Upgrade: h2c`` on a ``GET`` is ignored and answered over HTTP/1.1.

The head is measured as it arrives: past ``max_header_bytes`` of an unfinished head the
connection is answered at once (at most one read, 256 KiB, is held beyond the limit), and a head
that completes within one read is measured exactly. Errors are OpenAI-shaped JSON.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from gateway.api.middleware import new_request_id
from gateway.errors import InvalidRequestError

KiB = 1024


@dataclass(frozen=True, slots=True)
class HttpLimits:
    """The limits of one listener (see the module doc for units and defaults)."""

    max_header_bytes: int = 60 * KiB
    max_headers: int = 100
    header_timeout_s: float = 60.0
    body_timeout_s: float = 60.0

    @classmethod
    def of(cls, app: Any) -> HttpLimits:
        """The limits of ``app``'s ``[server]`` settings (defaults when it has none)."""
        try:
            server = app.state.container.settings.server
        except AttributeError:
            return cls()
        return cls(server.max_header_bytes, server.max_headers, server.header_timeout_s, server.body_timeout_s)


class _Refused(Exception):
    """Raised from a parser callback to stop parsing a request that is answered with an error."""


def _error(status: int, code: str, message: str) -> bytes:
    error = InvalidRequestError(message, code=code)
    body = error.body()
    return b"".join((
        STATUS_LINE[status], b"content-type: application/json\r\ncontent-length: ", str(len(body)).encode(),
        b"\r\nx-request-id: ", new_request_id(), b"\r\nconnection: close\r\n\r\n", body,
    ))


_NO_UPGRADE = "kvgate serves HTTP/1.1 only: no WebSocket and no protocol upgrade on a request with a body."
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
        self._timer: asyncio.TimerHandle | None = None
        self._refusal: bytes | None = None

    # -- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
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
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            if self._refusal is not None:
                self._refuse(self._refusal)
                return
            self.logger.warning("Invalid HTTP request received.")
            self.send_400_response("Invalid HTTP request received.")
            return
        if self._in_head:
            if self._head_started:
                if self._head_bytes > self.limits.max_header_bytes:
                    self._refuse(self._too_large())
                elif self._timer is None:
                    self._arm(self.limits.header_timeout_s)
        elif self._timer is None and self.cycle is not None and self.cycle.more_body:
            self._arm(self.limits.body_timeout_s)  # the body is still coming

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
            self._refusal = _error(400, "upgrade_not_supported", _NO_UPGRADE)
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
        return _error(431, "request_header_fields_too_large", _TOO_LARGE.format(limits.max_header_bytes, limits.max_headers))

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
                self._refuse(_error(408, "request_timeout", "The request headers did not arrive in time (server.header_timeout_s)."))
            elif self.cycle is None:  # a new connection that never sent a byte
                self.transport.close()
            return
        cycle = self.cycle
        if cycle is None or not cycle.more_body:
            return
        # the gateway's turn, not the client's (the rest of a body sent after the answer is the client's)
        if not cycle.response_complete and (self.flow.read_paused or cycle.waiting_for_100_continue):
            self._last_read = now
        left = self._last_read + self.limits.body_timeout_s - now
        if left > 0:
            self._arm(left)
        elif cycle.response_started:
            self.transport.close()
        else:
            self._refuse(_error(408, "request_timeout", "The request body stalled (server.body_timeout_s)."))

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to a request llhttp cannot parse, in OpenAI's error shape (JSON), then close."""
        self._refuse(_error(400, "invalid_http_request", f"{msg} kvgate could not parse it as HTTP/1.1."))

    def _refuse(self, answer: bytes) -> None:
        """Write ``answer`` (a complete response) and close; a request being served sees a disconnect."""
        self._refusal = answer
        self._disarm()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.response_started = True  # nothing else is written on this connection
            cycle.disconnected = True
            cycle.message_event.set()
        if not self.transport.is_closing():
            self.transport.write(answer)
            self.transport.close()
