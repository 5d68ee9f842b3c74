"""The oracle baseline: the hit rate a router with full knowledge of every cache would reach.

Algorithm (a greedy clairvoyant router, replayed offline over the trace in arrival order):

1. Every worker has a :class:`~backends.sim.prefix_cache.PrefixCache` of the benchmark's
   capacity and block size, and prompts are tokenized with the workers' tokenizer and chat
   template, so hits are counted exactly as the simulated workers count them (whole blocks, at
   most ``prompt - 1`` tokens).
2. **Load bound**: after ``i`` requests no worker may hold more than
   ``ceil(load_bound * i / workers)`` of them, so the oracle cannot buy hits with imbalance
   (``load_bound = 1.0`` forces a perfectly even split; the default 1.1 allows 10%).
3. Each request goes to the eligible worker with the **longest cached prefix** (ties: fewer
   requests, then lower index); its prompt blocks are then cached there (LRU, same eviction).

It knows every cache exactly, never waits for metrics, and ignores the blocks that concurrent
requests pin and the output blocks, so it bounds from above what a real router can reach under the
same load bound. (Greedy is not the global optimum of the assignment problem, which needs the
future; it is the standard "perfect information, no lookahead" baseline.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from backends.sim.prefix_cache import PrefixCache, block_hashes, hit_blocks_limit
from backends.sim.presets import EnginePreset
from backends.sim.tokenizer import SimTokenizer
from bench.trace import TraceRequest


@dataclass(frozen=True)
class OracleResult:
    """Hits and queries in tokens, requests per worker, and the bound that was applied."""

    hits: int
    queries: int
    per_worker: tuple[int, ...]
    load_bound: float

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0

    @property
    def imbalance(self) -> float:
        mean = sum(self.per_worker) / len(self.per_worker)
        return max(self.per_worker) / mean if mean else 0.0


def _insert(cache: PrefixCache, hashes: Sequence[int], prompt_len: int, hit: int) -> None:
    """Cache a prompt's blocks on ``cache`` as a finished request would leave them."""
    held = cache.pin(hashes[:hit])
    needed = -(-prompt_len // cache.block_size) - hit
    if not cache.can_allocate(needed):
        cache.release(held)
        return
    cache.allocate(held, needed)
    for index in range(hit, len(hashes)):
        cache.promote(held, index, hashes[index])
    cache.release(held)


def oracle(requests: Sequence[TraceRequest], workers: int, preset: EnginePreset,
           load_bound: float = 1.1) -> OracleResult:
    """Replay ``requests`` through the greedy clairvoyant router (see module docstring)."""
    if workers < 1 or load_bound < 1.0:
        raise ValueError("need at least one worker and load_bound >= 1")
    tokenizer = SimTokenizer(default_system_prompt=preset.default_system_prompt)
    caches = [PrefixCache(preset.num_blocks, preset.block_size) for _ in range(workers)]
    counts = [0] * workers
    hits = queries = 0
    for index, request in enumerate(requests):
        prompt = tokenizer.apply_chat_template(request.messages)
        hashes = block_hashes(prompt, preset.block_size)
        limit = hit_blocks_limit(len(prompt), preset.block_size)
        cap = max(1, math.ceil(load_bound * (index + 1) / workers))
        eligible = [w for w in range(workers) if counts[w] < cap] or list(range(workers))
        matches = {w: caches[w].match(hashes, limit) for w in eligible}
        chosen = max(eligible, key=lambda w: (matches[w], -counts[w], -w))
        counts[chosen] += 1
        hits += matches[chosen] * preset.block_size
        queries += len(prompt)
        _insert(caches[chosen], hashes, len(prompt), matches[chosen])
    return OracleResult(hits, queries, tuple(counts), load_bound)
