"""Content codings of endpoint responses: above ``upstream/`` every body is identity bytes.

kvgate asks every endpoint for ``Accept-Encoding: identity``, but some compress anyway. Relaying
such bytes without their ``Content-Encoding`` leaves the client with a body it cannot read, and
the stream observer (TTFT, usage, finish, in-band errors) with nothing it can parse. So a
compressed response is decoded here, as it arrives, and handed out without ``Content-Encoding``
and ``Content-Length`` (the writers frame the decoded body themselves); httpx's decoders
(``httpx._decoders``) do the same for its clients.

* ``gzip`` / ``x-gzip`` and ``deflate`` (the zlib format of RFC 9110 section 8.4.1.2, or the raw
  DEFLATE some servers send under that name) are decoded with ``zlib``; ``identity`` is nothing.
* Any other coding (``br``, ``zstd``, ``compress``, several codings in a row), or a body that is
  not valid in its coding, is an :class:`~gateway.errors.UpstreamError`: the endpoint failed
  (before the first byte reached the client, the request fails over).
* Bounded: one decoding step yields at most ``STEP_BYTES`` (1 MiB; the rest of the input waits
  for the next read), and a whole body read at once at most ``MAX_DECODED_BYTES`` (64 MiB), so
  a small "zip bomb" cannot take the gateway's memory.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import TYPE_CHECKING

from gateway.errors import UpstreamError

if TYPE_CHECKING:
    from gateway.upstream.client import UpstreamResponse

STEP_BYTES = 1024 * 1024
MAX_DECODED_BYTES = 64 * 1024 * 1024
_DROPPED = ("content-encoding", "content-length")


class _Inflater:
    """Incremental zlib decoding of one coding; ``feed``/``more``/``flush`` never yield more than a step."""

    __slots__ = ("_obj", "_tail", "_deflate", "_fed")

    def __init__(self, coding: str) -> None:
        self._deflate = coding == "deflate"
        self._obj = zlib.decompressobj(zlib.MAX_WBITS if self._deflate else 16 + zlib.MAX_WBITS)
        self._tail = b""
        self._fed = False

    @property
    def pending(self) -> bool:
        """Input is left that the last step did not decode."""
        return bool(self._tail)

    def feed(self, data: bytes) -> bytes:
        buffer = self._tail + data if self._tail else data
        try:
            out = self._obj.decompress(buffer, STEP_BYTES)
        except zlib.error:
            if not (self._deflate and not self._fed):
                raise UpstreamError("the endpoint sent a body that is not valid in its Content-Encoding") from None
            self._obj = zlib.decompressobj(-zlib.MAX_WBITS)  # raw DEFLATE sent as "deflate"
            self._fed = True
            return self.feed(data)
        self._fed = True
        self._tail = self._obj.unconsumed_tail
        return out

    def flush(self) -> bytes:
        try:
            return self._obj.flush()
        except zlib.error:
            raise UpstreamError("the endpoint sent a body that is not valid in its Content-Encoding") from None


class DecodedResponse:
    """An :class:`~gateway.upstream.client.UpstreamResponse` whose compressed body is decoded."""

    __slots__ = ("_inner", "status", "headers", "_inflater", "_error", "_ended")

    def __init__(self, inner: UpstreamResponse, coding: str) -> None:
        self._inner = inner
        self.status = inner.status
        self.headers = {name.lower(): value for name, value in inner.headers.items() if name.lower() not in _DROPPED}
        self._inflater = _Inflater(coding) if coding in ("gzip", "x-gzip", "deflate") else None
        self._error = None if self._inflater is not None else UpstreamError(f"unsupported Content-Encoding {coding[:40]!r}")
        self._ended = False

    def _failed(self, error: UpstreamError) -> UpstreamError:
        self._inner.close()
        return error

    async def read(self) -> bytes:
        if self._error is not None or self._inflater is None:
            raise self._failed(self._error or UpstreamError("unsupported Content-Encoding"))
        raw = await self._inner.read()
        parts, size = [], 0
        try:
            part = self._inflater.feed(raw)
            while True:
                parts.append(part)
                size += len(part)
                if size > MAX_DECODED_BYTES:
                    raise UpstreamError(f"the endpoint's body is over {MAX_DECODED_BYTES >> 20} MiB once decoded")
                if not self._inflater.pending:
                    break
                part = self._inflater.feed(b"")
            parts.append(self._inflater.flush())
        except UpstreamError as error:
            raise self._failed(error) from None
        return b"".join(parts)

    async def next_chunk(self) -> bytes:
        if self._error is not None or self._inflater is None:
            raise self._failed(self._error or UpstreamError("unsupported Content-Encoding"))
        try:
            while True:
                if self._inflater.pending:
                    out = self._inflater.feed(b"")
                else:
                    raw = await self._inner.next_chunk()
                    if not raw:
                        if self._ended:
                            return b""
                        self._ended = True
                        return self._inflater.flush()
                    out = self._inflater.feed(raw)
                if out:
                    return out
        except UpstreamError as error:
            raise self._failed(error) from None

    def close(self) -> None:
        self._inner.close()

    def release(self) -> None:
        self._inner.release()


def decoded(response: UpstreamResponse) -> UpstreamResponse:
    """``response`` itself when its body is identity bytes, else a :class:`DecodedResponse`."""
    headers: Mapping[str, str] = response.headers
    coding = headers.get("content-encoding")
    if coding is None:
        return response
    coding = coding.strip().lower()
    if coding in ("", "identity"):
        return response
    return DecodedResponse(response, coding)
