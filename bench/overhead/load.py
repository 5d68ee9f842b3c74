"""[io] Load generators of an overhead run.

Non-streaming load is closed-loop: C connections, each sending the next request as soon as the
last answer is read. ``wrk`` (Debian's, one thread, a Lua script for the POST body, headers and
a JSON summary) costs a few microseconds per request, so one core of load generator keeps up
with the fastest peers; an asyncio client (aiohttp) stands in when ``wrk`` is not installed
(about 100 us per request of its own: the ceiling of measured req/s drops, CPU per request of the
gateway does not change). Streaming is measured with aiohttp: time to the first body byte of an
SSE answer, one stream at a time. The memory checks open many slow streams at once, and send
many distinct long prompts (each one unique from its first byte, so every prefix block is new).

Every function returns plain dicts (the JSON record keeps them as they are).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence

import aiohttp

from bench.overhead.upstream import HOLD_MARKER, MODEL

Tick = Callable[[], None]


def chat_body(stream: bool = False, content: str = "Say hello. " * 8) -> bytes:
    return json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 16, "stream": stream},
        separators=(",", ":"),
    ).encode()


def _percentile(sorted_values: Sequence[float], q: float) -> float | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[index]


# ---- wrk -------------------------------------------------------------------------------------

_LUA_COMMON = r"""
wrk.method = "POST"
{headers}
local counter = 0
{request_or_body}
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {{"requests":%d,"duration_us":%d,"errors_connect":%d,"errors_read":%d,"errors_write":%d,' ..
    '"errors_status":%d,"errors_timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"mean_us":%.1f,"max_us":%d}}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean, latency.max))
end
"""

_LUA_BODY = "wrk.body = {body}"
_LUA_UNIQUE = r"""
local head = {head}
local tail = {tail}
local filler = string.rep("lorem ipsum dolor sit amet ", math.ceil({size} / 27)):sub(1, {size})
local tag = {tag}
request = function()
  counter = counter + 1
  return wrk.format(nil, nil, nil, head .. tag .. string.format("-%09d ", counter) .. filler .. tail)
end
"""
def _lua_string(text: str | bytes) -> str:
    if isinstance(text, bytes):
        text = text.decode()
    return "[==[" + text + "]==]"


def wrk_script(
    headers: Mapping[str, str],
    *,
    body: bytes | None = None,
    unique_prompt_bytes: int = 0,
    tag: str = "p",
) -> str:
    headers = {"Content-Type": "application/json", **headers}
    header_lines = "\n".join(f"wrk.headers[ {_lua_string(k)} ] = {_lua_string(v)}" for k, v in headers.items())
    if unique_prompt_bytes:
        head, tail = chat_body(content="@@PROMPT@@").decode().split("@@PROMPT@@")
        request_or_body = _LUA_UNIQUE.format(
            head=_lua_string(head), tail=_lua_string(tail), size=unique_prompt_bytes, tag=_lua_string(tag)
        )
    else:
        request_or_body = _LUA_BODY.format(body=_lua_string(body or chat_body()))
    return _LUA_COMMON.format(
        headers=header_lines,
        request_or_body=request_or_body,
    )


def wrk_available() -> bool:
    return shutil.which("wrk") is not None


def run_wrk(
    url: str,
    headers: Mapping[str, str],
    *,
    concurrency: int,
    seconds: float,
    cores: Sequence[int],
    body: bytes | None = None,
    unique_prompt_bytes: int = 0,
    tag: str = "p",
    on_tick: Tick | None = None,
) -> dict[str, float | int | None]:
    """One closed-loop wrk run (a thread per load core, ``concurrency`` connections, whole seconds).

    wrk runs for a duration: it cannot stop after a number of requests (``wrk.thread:stop()``
    ends the thread's loop but the run still lasts ``-d``).
    """
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as handle:
        handle.write(
            wrk_script(headers, body=body, unique_prompt_bytes=unique_prompt_bytes, tag=tag)
        )
        script = handle.name
    argv = [
        "taskset", "-c", ",".join(map(str, cores)),
        "wrk", f"-t{max(1, min(len(cores), concurrency))}", f"-c{concurrency}", f"-d{max(1, math.ceil(seconds))}s", "--timeout", "30s", "-s", script, url,
    ]
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        while True:
            try:
                out, _ = proc.communicate(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                if on_tick is not None:
                    on_tick()
    finally:
        os.unlink(script)
    line = next((line for line in out.splitlines() if line.startswith("WRKJSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk gave no summary: {out.strip()[-400:]}")
    raw = json.loads(line[len("WRKJSON "):])
    seconds_run = raw["duration_us"] / 1e6
    errors = sum(raw[key] for key in raw if key.startswith("errors_"))
    return {
        "requests": raw["requests"],
        "errors": errors,
        "errors_status": raw["errors_status"],
        "seconds": seconds_run,
        "requests_per_s": raw["requests"] / seconds_run if seconds_run else 0.0,
        "p50_ms": raw["p50_us"] / 1e3,
        "p90_ms": raw["p90_us"] / 1e3,
        "p99_ms": raw["p99_us"] / 1e3,
        "mean_ms": raw["mean_us"] / 1e3,
        "max_ms": raw["max_us"] / 1e3,
    }


# ---- asyncio client --------------------------------------------------------------------------


async def _closed_loop(
    url: str,
    headers: Mapping[str, str],
    *,
    concurrency: int,
    seconds: float,
    body: bytes | None,
    unique_prompt_bytes: int,
    tag: str,
    requests: int,
    on_tick: Tick | None,
) -> dict[str, float | int | None]:
    latencies: list[float] = []
    errors = 0
    counter = 0
    filler = ("lorem ipsum dolor sit amet " * (unique_prompt_bytes // 27 + 1))[:unique_prompt_bytes]
    fixed = body or chat_body()
    deadline = time.perf_counter() + seconds
    all_headers = {"content-type": "application/json", **headers}
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:

        async def worker() -> None:
            nonlocal errors, counter
            while time.perf_counter() < deadline and (not requests or len(latencies) + errors < requests):
                counter += 1
                data = chat_body(content=f"{tag}-{counter:09d} {filler}") if unique_prompt_bytes else fixed
                started = time.perf_counter()
                try:
                    async with session.post(url, data=data, headers=all_headers) as response:
                        await response.read()
                        ok = response.status == 200
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    ok = False
                if ok:
                    latencies.append(time.perf_counter() - started)
                else:
                    errors += 1

        async def ticker() -> None:
            while on_tick is not None:
                await asyncio.sleep(0.5)
                on_tick()

        started = time.perf_counter()
        tick = asyncio.create_task(ticker())
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        tick.cancel()
    latencies.sort()
    return {
        "requests": len(latencies) + errors,
        "errors": errors,
        "errors_status": errors,
        "seconds": elapsed,
        "requests_per_s": (len(latencies) + errors) / elapsed if elapsed else 0.0,
        "p50_ms": _ms(_percentile(latencies, 50)),
        "p90_ms": _ms(_percentile(latencies, 90)),
        "p99_ms": _ms(_percentile(latencies, 99)),
        "mean_ms": _ms(statistics.fmean(latencies) if latencies else None),
        "max_ms": _ms(latencies[-1] if latencies else None),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def run_load(
    url: str,
    headers: Mapping[str, str],
    *,
    concurrency: int,
    seconds: float,
    cores: Sequence[int],
    loadgen: str,
    body: bytes | None = None,
    unique_prompt_bytes: int = 0,
    tag: str = "p",
    requests: int = 0,
    on_tick: Tick | None = None,
) -> dict[str, float | int | None]:
    """Closed-loop non-streaming load with ``loadgen`` (``wrk`` or ``aiohttp``).

    ``requests`` caps the aiohttp client's run (0: none); wrk runs for ``seconds`` only.
    """
    if loadgen == "wrk":
        return run_wrk(
            url, headers, concurrency=concurrency, seconds=seconds, cores=cores, body=body,
            unique_prompt_bytes=unique_prompt_bytes, tag=tag, on_tick=on_tick,
        )
    return asyncio.run(
        _closed_loop(
            url, headers, concurrency=concurrency, seconds=seconds, body=body,
            unique_prompt_bytes=unique_prompt_bytes, tag=tag, requests=requests, on_tick=on_tick,
        )
    )


# ---- streaming -------------------------------------------------------------------------------


async def _ttfb(url: str, headers: Mapping[str, str], count: int, seconds: float) -> dict[str, float | int | None]:
    first: list[float] = []
    whole: list[float] = []
    errors = 0
    body = chat_body(stream=True)
    all_headers = {"content-type": "application/json", "accept": "text/event-stream", **headers}
    deadline = time.perf_counter() + seconds
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        for _ in range(count):
            if time.perf_counter() > deadline:
                break
            started = time.perf_counter()
            try:
                async with session.post(url, data=body, headers=all_headers) as response:
                    chunk = await response.content.readany()
                    got_first = time.perf_counter()
                    tail = chunk
                    async for data in response.content.iter_any():
                        tail = (tail + data)[-64:]
                    ended = time.perf_counter()
                    ok = response.status == 200 and bool(chunk) and b"[DONE]" in tail
            except (aiohttp.ClientError, asyncio.TimeoutError):
                ok = False
            if ok:
                first.append(got_first - started)
                whole.append(ended - started)
            else:
                errors += 1
    first.sort()
    whole.sort()
    return {
        "streams": len(first) + errors,
        "errors": errors,
        "ttfb_p50_ms": _ms(_percentile(first, 50)),
        "ttfb_p90_ms": _ms(_percentile(first, 90)),
        "ttfb_p99_ms": _ms(_percentile(first, 99)),
        "total_p50_ms": _ms(_percentile(whole, 50)),
    }


def stream_ttfb(url: str, headers: Mapping[str, str], *, count: int, seconds: float) -> dict[str, float | int | None]:
    """``count`` streams one after another (capped at ``seconds``): time to the first body byte."""
    return asyncio.run(_ttfb(url, headers, count, seconds))


async def _open_streams(
    url: str, headers: Mapping[str, str], count: int, hold_s: int, open_timeout_s: float, on_tick: Tick
) -> dict[str, float | int | None]:
    body = chat_body(stream=True, content=f"{HOLD_MARKER}{hold_s} keep this stream open")
    all_headers = {"content-type": "application/json", "accept": "text/event-stream", **headers}
    opened = 0
    completed = 0
    errors = 0
    all_open = asyncio.Event()
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=hold_s + open_timeout_s + 60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one() -> None:
            nonlocal opened, completed, errors
            try:
                async with session.post(url, data=body, headers=all_headers) as response:
                    if response.status != 200 or not await response.content.readany():
                        errors += 1
                        return
                    opened += 1
                    if opened == count:
                        all_open.set()
                    async for _ in response.content.iter_any():
                        pass
                    completed += 1
            except (aiohttp.ClientError, asyncio.TimeoutError):
                errors += 1

        started = time.perf_counter()
        tasks = [asyncio.create_task(one()) for _ in range(count)]
        try:
            await asyncio.wait_for(all_open.wait(), open_timeout_s)
        except asyncio.TimeoutError:
            pass
        open_s = time.perf_counter() - started
        open_now = opened
        on_tick()  # the RSS sample with (nearly) every stream open
        while not all(task.done() for task in tasks):
            await asyncio.sleep(0.5)
            on_tick()
        await asyncio.gather(*tasks)
    return {"requested": count, "opened": open_now, "open_s": open_s, "completed": completed, "errors": errors}


def open_streams(
    url: str, headers: Mapping[str, str], *, count: int, hold_s: int, open_timeout_s: float, on_tick: Tick
) -> dict[str, float | int | None]:
    """Open ``count`` slow streams at once (the upstream holds each ``hold_s`` s), sampling with ``on_tick``."""
    return asyncio.run(_open_streams(url, headers, count, hold_s, open_timeout_s, on_tick))


def wait_ready(url: str, headers: Mapping[str, str], timeout_s: float, alive: Callable[[], bool]) -> str | None:
    """POST a chat request until it answers 200; None when ready, else why not."""

    async def probe() -> str | None:
        deadline = time.monotonic() + timeout_s
        last = "no answer"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            while time.monotonic() < deadline:
                if not alive():
                    return "process exited"
                try:
                    async with session.post(
                        url, data=chat_body(), headers={"content-type": "application/json", **headers}
                    ) as response:
                        text = await response.text()
                        if response.status == 200:
                            return None
                        last = f"HTTP {response.status}: {text[:200]}"
                except (aiohttp.ClientError, asyncio.TimeoutError) as error:
                    last = f"{type(error).__name__}: {error}"
                await asyncio.sleep(0.25)
        return f"not ready after {timeout_s:.0f} s ({last})"

    return asyncio.run(probe())

