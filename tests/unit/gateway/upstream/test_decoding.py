"""Decoding compressed endpoint bodies (``gateway/upstream/decoding.py``), table-driven."""

from __future__ import annotations

import asyncio
import zlib

import pytest

from gateway.errors import UpstreamError
from gateway.upstream.decoding import MAX_DECODED_BYTES, STEP_BYTES, DecodedResponse, decoded

BODY = b'data: {"choices":[{"delta":{"content":"hello"}}]}\n\n' * 200


class Body:
    """An UpstreamResponse whose (encoded) body comes in the given pieces."""

    def __init__(self, pieces: list[bytes], coding: str | None) -> None:
        self.status = 200
        self.headers = {"content-type": "text/event-stream", "content-length": str(sum(map(len, pieces)))}
        if coding is not None:
            self.headers["content-encoding"] = coding
        self._pieces = list(pieces)
        self.closed = False

    async def read(self) -> bytes:
        data, self._pieces = b"".join(self._pieces), []
        return data

    async def next_chunk(self) -> bytes:
        return self._pieces.pop(0) if self._pieces else b""

    def close(self) -> None:
        self.closed = True

    def release(self) -> None:
        pass


def encode(coding: str, data: bytes) -> bytes:
    if coding in ("gzip", "x-gzip"):
        return zlib.compress(data, wbits=31)
    if coding == "deflate":
        return zlib.compress(data)
    obj = zlib.compressobj(wbits=-15)  # raw DEFLATE, sent by some servers as "deflate"
    return obj.compress(data) + obj.flush()


async def drain(response: object) -> bytes:
    out = []
    while chunk := await response.next_chunk():  # type: ignore[attr-defined]
        out.append(chunk)
    return b"".join(out)


def test_identity_is_not_wrapped() -> None:
    for coding in (None, "identity", " Identity "):
        plain = Body([BODY], coding)
        assert decoded(plain) is plain


@pytest.mark.parametrize("coding, sent_as", [("gzip", "gzip"), ("x-gzip", "x-gzip"), ("deflate", "deflate"), ("raw", "deflate")])
def test_whole_and_streamed_bodies_decode(coding: str, sent_as: str) -> None:
    encoded = encode(coding, BODY)
    whole = decoded(Body([encoded], sent_as.upper()))
    assert isinstance(whole, DecodedResponse) and "content-encoding" not in whole.headers and "content-length" not in whole.headers
    assert asyncio.run(whole.read()) == BODY
    pieces = [encoded[i : i + 7] for i in range(0, len(encoded), 7)]
    assert asyncio.run(drain(decoded(Body(pieces, sent_as)))) == BODY


@pytest.mark.parametrize("coding, pieces", [("br", [b"\x0b\x02\x80hello\x03"]), ("gzip", [b"not gzip at all"]), ("gzip, gzip", [b"x"])])
def test_unsupported_or_corrupt_is_an_upstream_error_and_closes(coding: str, pieces: list[bytes]) -> None:
    for read in ("read", "next_chunk"):
        inner = Body(pieces, coding)
        with pytest.raises(UpstreamError):
            asyncio.run(getattr(decoded(inner), read)())
        assert inner.closed


def test_a_bomb_is_bounded() -> None:
    bomb = zlib.compress(b"\0" * (MAX_DECODED_BYTES + STEP_BYTES), wbits=31)
    assert len(bomb) < MAX_DECODED_BYTES // 500
    with pytest.raises(UpstreamError, match="once decoded"):
        asyncio.run(decoded(Body([bomb], "gzip")).read())
    stream = decoded(Body([bomb], "gzip"))
    assert len(asyncio.run(stream.next_chunk())) <= STEP_BYTES  # one step at a time
