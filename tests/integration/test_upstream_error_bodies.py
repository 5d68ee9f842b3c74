"""An endpoint's non-JSON error page never reaches the client (issue 16, "also found").

A scripted upstream answers with an HTML error page holding a Python ``Traceback`` (what a proxy
in front of a crashed engine, or a framework's debug page, sends). With failover off the client
gets kvgate's 502: OpenAI-shaped, with the status and a short reason, and none of the page.
An endpoint's 4xx in HTML is summarised the same way; one short line of plain text is still
relayed as it came (``tests/integration/test_errors.py``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from tests.support.gateway import RunningGateway, error_shape_ok
from tests.support.scripted import ScriptedUpstream

PAGE = b"""<!DOCTYPE html><html><head><title>500 Internal Server Error</title></head><body>
<h1>Internal Server Error</h1><pre>Traceback (most recent call last):
  File "/opt/engine/server.py", line 42, in handle
    raise RuntimeError("secret-token-abc123 at 10.0.0.7")
RuntimeError: secret-token-abc123 at 10.0.0.7</pre></body></html>"""


class PagingUpstream(ScriptedUpstream):
    """A scripted upstream with one more step: ``("page", status)`` answers :data:`PAGE` as ``text/html``."""

    async def _run(self, steps: list[tuple[Any, ...]], body: dict[str, Any], writer: asyncio.StreamWriter) -> bool:
        if steps and steps[0][0] == "page":
            head = f"HTTP/1.1 {steps[0][1]} X\r\ncontent-type: text/html\r\ncontent-length: {len(PAGE)}\r\n\r\n"
            writer.write(head.encode() + PAGE)
            await writer.drain()
            return True
        return await super()._run(steps, body, writer)


@pytest.fixture(scope="module")
def upstream() -> Iterator[PagingUpstream]:
    server = PagingUpstream("P").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway(upstream: PagingUpstream) -> Iterator[RunningGateway]:
    running = RunningGateway(
        {
            "circuit": {"consecutive_failures": 1_000_000, "min_requests": 1_000_000},
            "clusters": {"main": {"endpoints": [{"name": "paged", "url": upstream.base_url, "model": "m"}]}},
            "models": {"m": {"cluster": "main"}},
        },
        health_checks=False,
    ).start()
    yield running
    running.stop()


def _leaks(message: str) -> list[str]:
    return [part for part in ("Traceback", "<html", "<h1>", "secret-token", "10.0.0.7", "RuntimeError") if part in message]


@pytest.mark.parametrize("status", [500, 502, 503])
@pytest.mark.parametrize("stream", [False, True])
def test_html_error_page_becomes_status_and_short_reason(
    gateway: RunningGateway, upstream: PagingUpstream, status: int, stream: bool
) -> None:
    upstream.script([("page", status)])
    response = httpx.post(
        f"{gateway.url}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream},
        headers={"X-Failover-Route": "false"},
        timeout=10,
    )
    assert response.status_code == 502
    payload = response.json()
    assert error_shape_ok(payload)
    message = payload["error"]["message"]
    assert _leaks(message) == [], message
    assert f"HTTP {status}" in message and "paged" in message
    assert "not JSON" in message or "non-JSON" in message
    assert len(message) < 200


def test_html_client_error_page_is_summarised_for_the_sdk(gateway: RunningGateway, upstream: PagingUpstream) -> None:
    upstream.script([("page", 404)])
    with openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0) as client:
        with pytest.raises(openai.NotFoundError) as caught:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    message = caught.value.message
    assert _leaks(message) == [], message
    assert "Not Found" in message
