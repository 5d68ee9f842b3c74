"""gateway/upstream/function.py: a function is a transport (the Upstream seam, in process)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.errors import UpstreamError, UpstreamTimeoutError
from gateway.upstream.client import Upstream
from gateway.upstream.function import FunctionRequest, FunctionResponse, FunctionUpstream


async def test_reads_come_as_given_and_a_break_is_raised_where_it_was_put() -> None:
    upstream: Upstream = FunctionUpstream(
        lambda request: FunctionResponse(200, [b"one", b"two", UpstreamError("reset")], {"Content-Type": "text/event-stream"})
    )
    response = await upstream.post("http://e/v1/chat/completions", b"{}", {"X-Request-Id": "r"}, 1.0)
    assert response.status == 200 and response.headers["content-type"] == "text/event-stream"
    assert [await response.next_chunk(), await response.next_chunk()] == [b"one", b"two"]
    with pytest.raises(UpstreamError):
        await response.next_chunk()


async def test_an_async_handler_and_body_the_request_recorded_and_close_ends_the_body() -> None:
    async def body() -> AsyncIterator[bytes]:
        yield b"a"
        yield b"b"

    async def handler(request: FunctionRequest) -> FunctionResponse:
        return FunctionResponse(201, body())

    upstream = FunctionUpstream(handler)
    response = await upstream.post("http://e/v1/x", b"payload", {"H": "v"}, 1.0)
    assert await response.next_chunk() == b"a"
    response.close()
    assert await response.next_chunk() == b"" and response.closed and not response.released
    (seen,) = upstream.requests
    assert (seen.method, seen.url, seen.body, seen.headers) == ("POST", "http://e/v1/x", b"payload", {"H": "v"})
    whole = await upstream.post("http://e/v1/x", b"", {}, 1.0)
    assert await whole.read() == b"ab"
    whole.release()
    assert whole.released


async def test_errors_before_the_headers_and_probes() -> None:
    def handler(request: FunctionRequest) -> FunctionResponse:
        if request.method == "GET":
            return FunctionResponse(204)
        raise UpstreamTimeoutError("timed out")

    upstream = FunctionUpstream(handler)
    with pytest.raises(UpstreamTimeoutError):
        await upstream.post("http://e/v1/x", b"", {}, 1.0)
    assert await upstream.probe("http://e/health", 1.0) == 204
    await upstream.aclose()
