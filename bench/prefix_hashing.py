"""Cost of prefix hashing and of one scheduling decision, per request, in one table.

Measures on this machine (median of repeated runs, microseconds):

- ``PromptHasher.key`` on chat prompts of 1, 8 and 32 KB with blocks of 128/256/512 bytes (xxh3
  chained through the seed, no memo) — the budget is 50 us for 32 KB — and with the system
  prompt's chain memoized (``prefix/hashing.py`` step 5);
- the same chain with ``hashlib.blake2b`` (8-byte digests) for comparison;
- tokenizing 32 KB instead (the simulator's regex tokenizer, a stand-in for a BPE tokenizer):
  why kvgate hashes bytes, not tokens;
- one decision, ``ProfileScheduler.schedule`` (hash + memory-store lookup + the default profile's
  7 scorers + 2 guards + picker), and its ``commit`` (the index write when the first token
  comes), over 4 and 16 endpoints with a warm index, awaited inside a running loop as on the
  request path: **CPU time** (``time.process_time``, best pass; wall time on this shared machine
  moves 2-4x with the neighbours) for prompts whose system prompt was seen before (the chain memo
  hits) and for prompts never seen; and the wall time of a decision.

    .venv/bin/python -m bench.prefix_hashing [--profile]

``--profile`` prints a cProfile of 3,000 decisions and commits (8 KB, 4 endpoints) by own time
instead.
"""

from __future__ import annotations

import asyncio
import cProfile
import hashlib
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable

import orjson
from prometheus_client import CollectorRegistry

from backends.sim.tokenizer import SimTokenizer
from bench.workload import WORDS
from gateway.endpoints.model import Endpoint, EndpointSpec
from gateway.endpoints.stats import StatsBoard
from gateway.prefix.hashing import PromptHasher, canonical_prompt
from gateway.protocol.openai import Operation, parse_request
from gateway.config import RoutingSettings
from gateway.scheduling.feedback import PrefixFeedback
from gateway.observability.metrics import RoutingMetrics
from gateway.scheduling.profile import ProfileScheduler
from gateway.scheduling.registry import PluginDeps
from gateway.state.memory import MemoryStore


def _text(size: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    out = []
    length = 0
    while length < size:
        word = rng.choice(WORDS)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)[:size]


def _us(fn: Callable[[], object], repeat: int = 7, number: int = 200) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        runs.append((time.perf_counter() - start) / number * 1e6)
    return statistics.median(runs)


def _blake2b_chain(data: bytes, block: int) -> list[bytes]:
    out, h = [], b""
    view = memoryview(data)
    for start in range(0, len(data) - block + 1, block):
        h = hashlib.blake2b(h + view[start : start + block], digest_size=8).digest()
        out.append(h)
    return out


def _request(size: int, question: str = "Why?", seed: int = 0) -> object:
    body = {"model": "m", "messages": [{"role": "system", "content": _text(size, seed)}, {"role": "user", "content": question}]}
    return parse_request(Operation.CHAT, orjson.dumps(body))


def _scheduler(n: int) -> tuple[ProfileScheduler, list[Endpoint]]:
    settings = RoutingSettings()
    store = MemoryStore()
    metrics = RoutingMetrics(CollectorRegistry())
    scheduler = ProfileScheduler(
        "prefix-aware", settings.all_profiles()["prefix-aware"], settings, PluginDeps(store, random.Random(0)),
        hasher=PromptHasher(), board=StatsBoard(), feedback=PrefixFeedback(settings.index, store, metrics, 200.0),
        metrics=metrics, clock=time.perf_counter,
    )
    return scheduler, [Endpoint(EndpointSpec(f"e{i}", "c", f"http://e{i}/v1", "m")) for i in range(n)]


async def _lifecycle_us(scheduler: ProfileScheduler, endpoints: list[Endpoint],
                        passes: list[list[object]]) -> tuple[float, float]:
    """CPU microseconds of ``schedule`` and of ``commit`` per request, as on the request path.

    Each request is scheduled (awaited inside a running loop) and then committed to its first
    endpoint (as when its first token arrives), and each part is timed with ``time.process_time``
    (this process's CPU time, minus the clock's own cost); the best pass counts. On this shared
    2-core machine wall-clock figures move by 2-4x with the neighbours' load, CPU time by ~10%.
    """
    clock = time.process_time
    calls = [clock() for _ in range(1001)]
    tick = (calls[-1] - calls[0]) / 1000
    best_schedule = best_commit = float("inf")
    for requests in passes:
        scheduling = committing = 0.0
        for request in requests:
            start = clock()
            decision = await scheduler.schedule(endpoints, request)  # type: ignore[arg-type]
            middle = clock()
            decision.commit(decision.ranked[0])
            committing += clock() - middle - tick
            scheduling += middle - start - tick
        best_schedule = min(best_schedule, scheduling / len(requests) * 1e6)
        best_commit = min(best_commit, committing / len(requests) * 1e6)
    return best_schedule, best_commit


async def _schedule_rows() -> list[tuple[str, float]]:
    rows = []
    for n in (4, 16):
        scheduler, endpoints = _scheduler(n)
        for i in range(50):  # a warm index: 50 prompts recorded over the endpoints
            decision = await scheduler.schedule(endpoints, _request(8192, seed=i))  # type: ignore[arg-type]
            decision.commit(decision.ranked[0])
        tenant = [_request(8192, question=f"Question {i}?", seed=i % 50) for i in range(200)]
        fresh = [[_request(8192, seed=1000 * (p + 1) + i) for i in range(200)] for p in range(10)]
        for label, passes in (("known system prompt", [tenant] * 15), ("never seen", fresh)):
            schedule, commit = await _lifecycle_us(scheduler, endpoints, passes)
            rows.append((f"schedule, 8 KB, {n} endpoints, CPU ({label})", schedule))
            rows.append((f"commit, 8 KB, {n} endpoints, CPU ({label})", commit))
        request = tenant[0]
        start = time.perf_counter()
        for _ in range(1000):
            await scheduler.schedule(endpoints, request)  # type: ignore[arg-type]
        rows.append((f"schedule, 8 KB, {n} endpoints, wall (known)", (time.perf_counter() - start) * 1000))
    return rows


def _profile() -> None:
    """cProfile of 3,000 decisions (8 KB, 4 endpoints), top functions by own time."""
    scheduler, endpoints = _scheduler(4)
    requests = [_request(8192, question=f"Question {i}?", seed=i % 50) for i in range(3000)]

    async def run() -> None:
        for request in requests[:50]:
            (await scheduler.schedule(endpoints, request)).commit(endpoints[0])  # type: ignore[arg-type]
        profiler = cProfile.Profile()
        profiler.enable()
        for request in requests:
            decision = await scheduler.schedule(endpoints, request)  # type: ignore[arg-type]
            decision.commit(decision.ranked[0])
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)

    asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    if "--profile" in argv:
        _profile()
        return 0
    rows = []
    for size in (1024, 8192, 32768):
        request = _request(size)
        data = canonical_prompt(request)  # type: ignore[arg-type]
        for block in (128, 256, 512):
            hasher = PromptHasher(block_bytes=block, memo_hashes=0)  # the whole chain, every time
            rows.append((f"xxh3 key, {size // 1024} KB, {block} B blocks", _us(lambda: hasher.key(request, "m"))))  # type: ignore[arg-type]
        memo = PromptHasher()
        rows.append((f"xxh3 key, {size // 1024} KB, 256 B blocks, head memoized", _us(lambda: memo.key(request, "m"))))  # type: ignore[arg-type]
        rows.append((f"blake2b chain, {size // 1024} KB, 256 B blocks", _us(lambda: _blake2b_chain(data, 256))))
    tokenizer = SimTokenizer(cache_size=0)
    text = _text(32768)
    rows.append(("regex tokenizer, 32 KB (tokens instead of bytes)", _us(lambda: tokenizer.encode(text), number=10)))
    rows += asyncio.run(_schedule_rows())
    width = max(len(name) for name, _ in rows)
    print(f"{'measurement'.ljust(width)}  median us")
    for name, value in rows:
        print(f"{name.ljust(width)}  {value:9.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
