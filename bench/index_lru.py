"""The prefix index's LRU, native (``gateway/prefix/_lru.c``) beside the pure-Python reference.

In one process, for each capacity: fill the LRU twice over with unique prompts' blocks (so it
sits at its capacity, evicting on every insert, as a gateway under distinct prompts does), then
time ``--inserts`` more inserts of ``--blocks`` new blocks each (a 200 KB prompt is 781 blocks of
256 bytes; 125 is a 32 KB one) with ``--churn-bytes`` of memory copied between inserts (a long
request's other work disturbs the caches), a ``match`` of a 781-block chain whose first half is
present, and the bytes held per entry (``tracemalloc`` for the Python LRU, the native one's
``nbytes``). Prints one table: per-insert p50, p99 and max (ms; the max is where the Python
``OrderedDict``'s table rebuilds show), inserts over 1 ms, match (us), bytes per entry::

    .venv/bin/python bench/index_lru.py [--capacities 16384,65536,262144] [--blocks 125,781] [--inserts 3000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import tracemalloc

from gateway.prefix import index as index_module


def _chains(rng: random.Random, blocks: int):
    while True:
        yield tuple(rng.getrandbits(64) for _ in range(blocks))


def measure(lru_type: type, capacity: int, blocks: int, inserts: int, churn_bytes: int, seed: int = 1) -> dict[str, float]:
    rng = random.Random(seed)
    chains = _chains(rng, blocks)
    tracemalloc.start()
    lru = lru_type(capacity)
    for _ in range(2 * capacity // blocks + 1):
        lru.insert(next(chains))
    traced = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    held = getattr(lru, "nbytes", traced)
    scratch = bytearray(churn_bytes)
    times = []
    for _ in range(inserts):
        chain = next(chains)
        if churn_bytes:
            bytes(scratch)  # a copy through the caches
        started = time.perf_counter()
        lru.insert(chain)
        times.append(time.perf_counter() - started)
    probe = next(chains)
    lru.insert(probe[: len(probe) // 2])
    rounds = 2_000
    started = time.perf_counter()
    for _ in range(rounds):
        lru.match(probe)
    match_us = (time.perf_counter() - started) / rounds * 1e6
    times.sort()
    return {
        "p50": statistics.median(times) * 1e3, "p99": times[int(len(times) * 0.99)] * 1e3, "max": times[-1] * 1e3,
        "over_1ms": sum(t > 1e-3 for t in times), "match_us": match_us, "bytes_per_entry": held / max(len(lru), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--capacities", default="16384,65536,262144")
    parser.add_argument("--blocks", default="125,781")
    parser.add_argument("--inserts", type=int, default=3000)
    parser.add_argument("--churn-bytes", type=int, default=8 << 20)
    args = parser.parse_args(argv)
    impls = [("python", index_module.PyBlockLRU)]
    if index_module._NativeBlockLRU is not None:
        impls.append(("native", index_module._NativeBlockLRU))
    else:
        print("gateway.prefix._lru is not built: the Python LRU only")
    print("| capacity | blocks/insert | LRU | insert p50 ms | p99 ms | max ms | inserts > 1 ms | match us | bytes/entry |")
    print("|---|---|---|---|---|---|---|---|---|")
    for capacity in (int(c) for c in args.capacities.split(",")):
        for blocks in (int(b) for b in args.blocks.split(",")):
            for name, lru_type in impls:
                r = measure(lru_type, capacity, blocks, args.inserts, args.churn_bytes)
                print(f"| {capacity:,} | {blocks} | {name} | {r['p50']:.3f} | {r['p99']:.3f} | {r['max']:.2f} | "
                      f"{r['over_1ms']} of {args.inserts} | {r['match_us']:.2f} | {r['bytes_per_entry']:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
