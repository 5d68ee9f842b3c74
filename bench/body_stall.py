"""How long does one large request body stall the gateway's event loop? A table, body size vs stall.

Runs the real gateway (``create_app`` + kvgate's own protocol) in this process's event loop next to
a ticker task that wakes every millisecond and records the longest gap between two wakeups (the
loop could serve nothing else during it). A fake upstream (aiohttp, its own process) answers every
chat request with a small completion. A client thread sends one request at a time over a raw
socket (pre-built bytes, so the client holds the GIL as little as possible) and the stall is the
longest ticker gap while that request was in flight; each size is sent ``--rounds`` times and the
median and worst are printed.

Two body shapes: ``one-message`` (one user message of that size) and ``many-messages`` (1 KiB
messages adding up to that size: many more JSON values to build). ``--basic`` routes with
``least-in-flight`` (no prefix hashing), to see what the parse and the forwarding cost alone;
``--thread-parse`` adds the figure that decides whether ``asyncio.to_thread`` could help: the
longest main-thread gap while ``orjson.loads`` runs in a worker thread, next to the inline parse.
``--stages`` prints, without a server, what each step the gateway runs on the loop costs per
request for one-message bodies of ``--stage-sizes`` KiB (parse, validation, depth check, prompt
view, route-selection signals with the classifier, prefix hashing, index insert: into an empty
index and into one at its 262,144-block cap, evicting as many), best of
``--rounds``; ``--offload`` adds the longest loop gap while ``parse_request_async`` parses the
body off the loop (``gateway/protocol/offload.py``)::

    .venv/bin/python bench/body_stall.py [--sizes 1,8,16,30] [--rounds 3] [--basic] [--thread-parse]
    .venv/bin/python bench/body_stall.py --stages [--stage-sizes 32,200,1024,30720] [--offload]
        [--mmap-threshold BYTES --trim-threshold BYTES]

The process's glibc thresholds are set as ``kvgate serve`` sets them (``gateway/cli.py``
``fixed_mmap_threshold``: 1 MiB and 16 MiB); ``--mmap-threshold 131072 --trim-threshold 131072``
gives the earlier setting, under which every buffer over 128 KiB was a fresh ``mmap``. With
``PYTHONPATH`` at another tree the same script times that tree's ``gateway``.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import socket
import statistics
import subprocess
import sys
import threading
import time
from typing import Any

import orjson
import uvicorn

from gateway.api.server import uvicorn_config
from gateway.app import create_app
from gateway.config import build_settings

MiB = 1024 * 1024
UPSTREAM = """
import sys
from aiohttp import web
BODY = b'{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'
async def chat(request):
    await request.read()
    return web.Response(body=BODY, content_type="application/json")
app = web.Application(client_max_size=64 * 1024 * 1024)
app.router.add_post("/v1/chat/completions", chat)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def body_of(shape: str, size: int) -> bytes:
    if shape == "one-message":
        messages = [{"role": "user", "content": "x" * size}]
    else:
        messages = [{"role": "user", "content": "y" * 1000} for _ in range(size // 1024)]
    return orjson.dumps({"model": "m", "messages": messages, "max_tokens": 1})


def send(port: int, body: bytes) -> int:
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: kvgate\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head + body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1])


class Ticker:
    """The longest gap between two wakeups of a 1 ms sleeper, since the last reset."""

    def __init__(self) -> None:
        self.worst = 0.0

    async def run(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            self.worst = max(self.worst, now - last - 0.001)
            last = now


async def main(args: argparse.Namespace) -> None:
    upstream_port, port = _free_port(), _free_port()
    upstream = subprocess.Popen([sys.executable, "-c", UPSTREAM, str(upstream_port)])
    server_section: dict[str, Any] = {"max_body_bytes": 64 * MiB}
    settings = build_settings({
        "server": server_section,
        "routing": {"policy": "least-in-flight"} if args.basic else {},
        "clusters": {"pool": {"endpoints": [{"url": f"http://127.0.0.1:{upstream_port}/v1", "model": "m"}]}},
        "models": {"m": {"cluster": "pool"}},
    })
    app = create_app(settings, health_checks=False)
    server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    for _ in range(300):  # the upstream process starts
        try:
            socket.create_connection(("127.0.0.1", upstream_port), timeout=1).close()
            break
        except OSError:
            await asyncio.sleep(0.1)
    ticker = Ticker()
    ticking = asyncio.create_task(ticker.run())
    rows = []
    try:
        for shape in ("one-message", "many-messages"):
            for size_mib in args.sizes:
                body = body_of(shape, size_mib * MiB)
                stalls = []
                for _ in range(args.rounds):
                    await asyncio.sleep(0.05)
                    ticker.worst = 0.0
                    status = await asyncio.to_thread(send, port, body)
                    stalls.append(ticker.worst)
                    if status != 200:
                        raise SystemExit(f"{shape} {size_mib} MiB: HTTP {status}")
                rows.append((shape, size_mib, statistics.median(stalls), max(stalls)))
    finally:
        ticking.cancel()
        server.should_exit = True
        await serving
        upstream.terminate()
    print(f"\nloop stall per request, {args.rounds} rounds, policy {settings.routing.policy}")
    print(f"{'shape':<15}{'body MiB':>9}{'median ms':>11}{'worst ms':>10}")
    for shape, size_mib, median, worst in rows:
        print(f"{shape:<15}{size_mib:>9}{median * 1000:>11.1f}{worst * 1000:>10.1f}")
    if args.thread_parse:
        print(f"\n{'shape':<15}{'body MiB':>9}{'inline parse ms':>17}{'gap, parse in a thread ms':>27}")
        for shape in ("one-message", "many-messages"):
            for size_mib in args.sizes:
                inline, threaded = thread_parse_gap(body_of(shape, size_mib * MiB))
                print(f"{shape:<15}{size_mib:>9}{inline * 1000:>17.1f}{threaded * 1000:>27.1f}")


def thread_parse_gap(body: bytes) -> tuple[float, float]:
    """(inline orjson.loads seconds, longest main-thread gap while a worker thread parses ``body``)."""
    started = time.perf_counter()
    orjson.loads(body)
    inline = time.perf_counter() - started
    done = threading.Event()
    worker = threading.Thread(target=lambda: (orjson.loads(body), done.set()))
    worst, last = 0.0, time.perf_counter()
    worker.start()
    while True:  # at least one sleep after the start: a parse that holds the GIL shows as one long gap
        time.sleep(0.001)
        now = time.perf_counter()
        worst, last = max(worst, now - last - 0.001), now
        if done.is_set():
            break
    worker.join()
    return inline, worst


def long_body(size: int, model: str = "m") -> bytes:
    """A chat body whose last user turn is ``size`` bytes of prose (a pasted document) and a question."""
    text = ("The quick brown fox jumps over the lazy dog 12345. " * (size // 51 + 1))[:size]
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": text + "\n\nSummarize the document above in three bullets."}]
    return orjson.dumps({"model": model, "messages": messages, "max_tokens": 64})


def set_malloc_thresholds(mmap_bytes: int, trim_bytes: int) -> bool:
    """``mallopt(M_MMAP_THRESHOLD)`` and ``mallopt(M_TRIM_THRESHOLD)`` as ``gateway/cli.py``'s
    ``fixed_mmap_threshold`` sets them in ``kvgate serve`` (here directly, so the same script runs
    against a tree whose ``gateway`` sets other values); False where glibc is not the allocator."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(-3, mmap_bytes)) and bool(libc.mallopt(-1, trim_bytes))
    except (OSError, AttributeError):
        return False


FULL_INDEX = 262_144  # routing.index.max_blocks_per_endpoint's default: the index's largest size


def stage_costs(raw: bytes, rounds: int) -> dict[str, float]:
    """Seconds per stage for ``raw`` (best of ``rounds``; cold hasher and index each round)."""
    from gateway.prefix.hashing import PromptHasher
    from gateway.prefix.index import BlockLRU
    from gateway.protocol.openai import InferenceRequest, Operation, parse_request
    from gateway.protocol.validation import check_depth, check_fields, check_messages
    from gateway.selection.classifier import ClassifierModel
    from gateway.selection.prompt import view
    from gateway.selection.signals import read_signals

    model = ClassifierModel.load()
    request = parse_request(Operation.CHAT, raw)
    body = request.body
    prompt = view(request)
    blocks = PromptHasher().key(request, "m").blocks
    full = BlockLRU(FULL_INDEX)  # an index at its cap (as bench.overhead's fills), so every insert evicts
    full.insert(range(1 << 62, (1 << 62) + FULL_INDEX))
    unique = iter([tuple(block ^ (round_ + 1) for block in blocks) for round_ in range(rounds)])  # new blocks each round
    stages: dict[str, Any] = {
        "orjson.loads": lambda: orjson.loads(raw),
        "check_messages+fields": lambda: (check_messages(body["messages"]), check_fields(body)),
        "check_depth": lambda: check_depth(raw, body),
        "parse_request (all)": lambda: parse_request(Operation.CHAT, raw),
        "prompt view": lambda: view(request),
        "read_signals (classifier)": lambda: read_signals(request, model, prompt=prompt),
        "prefix key (cold)": lambda: PromptHasher().key(InferenceRequest(Operation.CHAT, "m", False, body, raw), "m"),
        "index insert (cold)": lambda: BlockLRU().insert(blocks),
        "index insert (full, evicting)": lambda: full.insert(next(unique)),
    }
    costs = {}
    for name, work in stages.items():
        best = float("inf")
        for _ in range(rounds):
            started = time.perf_counter()
            work()
            best = min(best, time.perf_counter() - started)
        costs[name] = best
    return costs


def print_stages(sizes_kib: list[int], rounds: int) -> None:
    """The ``--stages`` table: one column per body size, one row per stage, milliseconds."""
    bodies = [long_body(size * 1024) for size in sizes_kib]
    columns = [stage_costs(body, rounds) for body in bodies]
    print(f"\nper-request cost on the loop, ms (best of {rounds}; one-message chat body)")
    print(f"{'stage':<28}" + "".join(f"{f'{size} KiB':>11}" for size in sizes_kib))
    for name in columns[0]:
        print(f"{name:<28}" + "".join(f"{column[name] * 1000:>11.3f}" for column in columns))


async def print_offload(sizes_kib: list[int], rounds: int) -> None:
    """The ``--offload`` table: inline ``parse_request`` vs the loop's longest gap (and the
    request's latency) while ``parse_request_async`` parses the same body in a worker process."""
    from gateway.protocol.offload import ParseOffload, parse_request_async
    from gateway.protocol.openai import Operation, parse_request

    offload = ParseOffload(inline_limit=0)
    await offload.start()
    ticker = Ticker()
    ticking = asyncio.create_task(ticker.run())
    print(f"\n{'body KiB':>9}{'inline ms':>11}{'offload: loop gap ms':>22}{'latency ms':>12}  (best of {rounds})")
    try:
        for size in sizes_kib:
            raw = long_body(size * 1024)
            inline = gap = latency = float("inf")
            for _ in range(rounds):
                started = time.perf_counter()
                parse_request(Operation.CHAT, raw)
                inline = min(inline, time.perf_counter() - started)
                await asyncio.sleep(0.01)
                ticker.worst = 0.0
                started = time.perf_counter()
                await parse_request_async(Operation.CHAT, raw, offload=offload)
                latency = min(latency, time.perf_counter() - started)
                await asyncio.sleep(0.002)  # the ticker's wakeup after the last step
                gap = min(gap, ticker.worst)
            print(f"{size:>9}{inline * 1000:>11.2f}{gap * 1000:>22.2f}{latency * 1000:>12.2f}")
    finally:
        ticking.cancel()
        await offload.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=lambda text: [int(part) for part in text.split(",")], default=[1, 8, 16, 30])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--thread-parse", action="store_true", help="also: orjson.loads in a thread vs inline")
    parser.add_argument("--basic", action="store_true", help="least-in-flight routing (no prefix hashing)")
    parser.add_argument("--stages", action="store_true", help="per-stage cost on the loop, no server (see the docstring)")
    parser.add_argument("--stage-sizes", type=lambda text: [int(part) for part in text.split(",")],
                        default=[32, 200, 1024, 30720], help="KiB, for --stages")
    parser.add_argument("--offload", action="store_true", help="with --stages: the loop gap of parse_request_async")
    parser.add_argument("--mmap-threshold", type=int, default=1 << 20,
                        help="glibc M_MMAP_THRESHOLD, bytes, set as `kvgate serve` does (default its 1 MiB; 131072: before)")
    parser.add_argument("--trim-threshold", type=int, default=16 << 20,
                        help="glibc M_TRIM_THRESHOLD, bytes (default kvgate's 16 MiB; 131072: glibc's, as before)")
    arguments = parser.parse_args()
    pinned = set_malloc_thresholds(arguments.mmap_threshold, arguments.trim_threshold)
    print(f"malloc: mmap threshold {arguments.mmap_threshold} B, trim threshold {arguments.trim_threshold} B"
          f" ({'set' if pinned else 'not glibc: unchanged'})")
    if arguments.stages:
        print_stages(arguments.stage_sizes, arguments.rounds)
        if arguments.offload:
            asyncio.run(print_offload(arguments.stage_sizes, arguments.rounds))
    else:
        asyncio.run(main(arguments))
