"""Open-loop replay of a trace against an OpenAI-compatible base URL, measuring each request.

Every request is sent at its trace time (``start + t``) whatever happened to the earlier ones
(open loop, as production traffic is), streamed with ``stream_options.include_usage``, and
measured from the moment it was sent:

- TTFT: until the first event carrying a non-empty ``content`` or ``reasoning`` delta;
- E2E: until ``data: [DONE]`` (or the end of the body);
- usage (prompt, cached and completion tokens) from the final usage chunk;
- the ``x-kvgate-endpoint`` header when the router sets it;
- an error: a non-200 status, an in-band ``{"error": ...}`` event, or a transport failure.

The client is aiohttp with an unbounded connection pool (one connection per in-flight request).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from bench.trace import TraceRequest


@dataclass(frozen=True)
class RequestResult:
    """What one replayed request measured (seconds; ``None`` where it never got there)."""

    kind: str
    ok: bool
    status: int
    ttft: float | None
    e2e: float | None
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    endpoint: str | None
    error: str | None = None


@dataclass(frozen=True)
class ReplayResult:
    results: tuple[RequestResult, ...]
    wall_s: float


async def replay(base_url: str, model: str, requests: Sequence[TraceRequest],
                 timeout_s: float = 300.0, time_scale: float = 1.0,
                 extra_body: Mapping[str, Any] | None = None) -> ReplayResult:
    """Send every request at ``t * time_scale`` after the start; wait for all of them."""
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        start = time.monotonic()
        tasks = [asyncio.ensure_future(
            _one(session, base_url, model, r, start + r.t * time_scale, extra_body))
            for r in requests]
        results = await asyncio.gather(*tasks)
        return ReplayResult(tuple(results), time.monotonic() - start)


async def _one(session: aiohttp.ClientSession, base_url: str, model: str,
               request: TraceRequest, at: float,
               extra_body: Mapping[str, Any] | None = None) -> RequestResult:
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    body = {**request.body(model), **(extra_body or {})}
    sent = time.monotonic()
    try:
        async with session.post(f"{base_url}/chat/completions", json=body) as reply:
            endpoint = reply.headers.get("x-kvgate-endpoint")
            if reply.status != 200:
                text = (await reply.text())[:200]
                return RequestResult(request.kind, False, reply.status, None, None, 0, 0, 0,
                                     endpoint, text)
            return await _read_stream(reply, request.kind, sent, endpoint)
    except (TimeoutError, aiohttp.ClientError, OSError) as exc:
        return RequestResult(request.kind, False, 0, None, None, 0, 0, 0, None,
                             f"{type(exc).__name__}: {exc}")


async def _read_stream(reply: aiohttp.ClientResponse, kind: str, sent: float,
                       endpoint: str | None) -> RequestResult:
    ttft: float | None = None
    usage: dict = {}
    error: str | None = None
    async for raw in reply.content:
        line = raw.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        try:
            event = json.loads(data)
        except ValueError:
            error = "malformed SSE event"
            continue
        if "error" in event:
            error = f"in-band error: {event['error'].get('message')}"
            continue
        if ttft is None and _has_text(event):
            ttft = time.monotonic() - sent
        usage = event.get("usage") or usage
    e2e = time.monotonic() - sent
    details = usage.get("prompt_tokens_details") or {}
    return RequestResult(
        kind, error is None and ttft is not None, 200, ttft, e2e,
        int(usage.get("prompt_tokens", 0)), int(details.get("cached_tokens") or 0),
        int(usage.get("completion_tokens", 0)), endpoint, error,
    )


def _has_text(event: dict) -> bool:
    for choice in event.get("choices") or ():
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning") or choice.get("text"):
            return True
    return False


async def replay_sequential(base_url: str, model: str, requests: Sequence[TraceRequest],
                            timeout_s: float = 300.0,
                            extra_body: Mapping[str, Any] | None = None) -> ReplayResult:
    """Send the requests one at a time (closed loop): TTFT without queueing, for calibration.

    ``extra_body`` is merged into every request (e.g. a ``cache_salt`` to start cold again).
    """
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        start = time.monotonic()
        results = [await _one(session, base_url, model, r, 0.0, extra_body) for r in requests]
        return ReplayResult(tuple(results), time.monotonic() - start)
