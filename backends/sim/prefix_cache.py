"""The simulated worker's KV block pool with automatic prefix caching, after vLLM v1.

Algorithm (vLLM ``v1/core/block_pool.py`` and ``kv_cache_manager.py``):

- The prompt is cut into blocks of ``block_size`` tokens; only **full** blocks get a hash. Hashes
  are **chained**: ``h_i = hash((h_{i-1}, tokens of block i))`` (with ``h_{-1}`` derived from the
  request's ``cache_salt``), so one hash names the whole prefix up to and including its block.
  Python's ``hash`` of a tuple of ints is not salted per process, so hashes are stable.
- A lookup walks the hashes from the first and stops at the first miss; at most
  ``num_tokens - 1`` tokens may hit (the last prompt token is always recomputed to get logits),
  so a prompt of exactly N full blocks hits at most N - 1 of them.
- The pool holds ``num_blocks`` blocks. A block referenced by a running request is **pinned**.
  When its last reference goes, a hashed block stays cached but becomes **evictable**; the
  evictable blocks form an LRU queue (a request's blocks are queued tail first, so a sequence's
  tail is evicted before its head). Allocation takes free blocks first, then evicts from the
  LRU head. A block computed for a prompt becomes hashed (cached) once it is full; if the same
  hash is already cached (two requests computed it concurrently) it stays an anonymous duplicate.
- Blocks holding generated tokens are anonymous here (vLLM also caches full output blocks, but a
  chat client sends back re-templated text, so they rarely hit across turns).

``usage`` is vLLM's ``kv_cache_usage_perc``: pinned and anonymous blocks over the pool; cached
but evictable blocks count as free.
"""

from __future__ import annotations

import zlib
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

ANONYMOUS: None = None
"""A held block without a hash (partial prompt block or generated tokens)."""

HeldBlocks = list[int | None]
"""The blocks one request holds, in order: a hash for a cached block, ``ANONYMOUS`` otherwise."""


def block_hashes(tokens: Sequence[int], block_size: int, cache_salt: str | None = None) -> list[int]:
    """Chained hashes of the full blocks of ``tokens`` (a trailing partial block gets none)."""
    parent = zlib.crc32(cache_salt.encode()) if cache_salt else 0
    hashes: list[int] = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, tuple(tokens[start : start + block_size])))
        hashes.append(parent)
    return hashes


def hit_blocks_limit(num_tokens: int, block_size: int) -> int:
    """Most blocks a lookup may return: whole blocks within ``num_tokens - 1`` tokens."""
    return max(num_tokens - 1, 0) // block_size


@dataclass(frozen=True)
class CacheCounters:
    """Lifetime counts of the pool (for tests and metrics)."""

    evictions: int
    cached_blocks: int
    pinned_blocks: int


class PrefixCache:
    """A pool of ``num_blocks`` KV blocks of ``block_size`` tokens with an LRU prefix cache."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks <= 0 or block_size <= 0:
            raise ValueError("num_blocks and block_size must be positive")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._refs: dict[int, int] = {}
        self._evictable: OrderedDict[int, None] = OrderedDict()
        self._anonymous = 0
        self._evictions = 0

    # -- queries ---------------------------------------------------------------------------
    def match(self, hashes: Sequence[int], max_blocks: int | None = None) -> int:
        """Number of leading ``hashes`` that are cached (pinned or evictable)."""
        limit = len(hashes) if max_blocks is None else min(max_blocks, len(hashes))
        count = 0
        while count < limit and (hashes[count] in self._refs or hashes[count] in self._evictable):
            count += 1
        return count

    def contains(self, block_hash: int) -> bool:
        """True if the block is cached (pinned or evictable)."""
        return block_hash in self._refs or block_hash in self._evictable

    @property
    def used_blocks(self) -> int:
        """Blocks that cannot be handed out: pinned plus anonymous."""
        return self._anonymous + len(self._refs)

    @property
    def usage(self) -> float:
        """Fraction of the pool in use (vLLM ``kv_cache_usage_perc``, 0..1)."""
        return self.used_blocks / self.num_blocks

    def counters(self) -> CacheCounters:
        """Eviction count and current cached/pinned block counts."""
        return CacheCounters(
            evictions=self._evictions,
            cached_blocks=len(self._refs) + len(self._evictable),
            pinned_blocks=len(self._refs),
        )

    def can_allocate(self, new_blocks: int, pin: Sequence[int] = ()) -> bool:
        """True if ``pin`` (cached hashes) can be pinned and ``new_blocks`` allocated after."""
        reclaimed = sum(1 for h in pin if h in self._evictable)
        return self.used_blocks + reclaimed + new_blocks <= self.num_blocks

    # -- mutations ------------------------------------------------------------------------
    def pin(self, hashes: Sequence[int]) -> HeldBlocks:
        """Take a reference on cached blocks (a lookup's hits); returns them as held blocks."""
        for h in hashes:
            if h in self._evictable:
                del self._evictable[h]
                self._refs[h] = 1
            else:
                self._refs[h] += 1
        return list(hashes)

    def allocate(self, held: HeldBlocks, new_blocks: int) -> None:
        """Append ``new_blocks`` anonymous blocks to ``held``, evicting LRU cached blocks."""
        if not self.can_allocate(new_blocks):
            raise MemoryError(f"KV pool exhausted: {new_blocks} blocks requested")
        overflow = self.used_blocks + len(self._evictable) + new_blocks - self.num_blocks
        for _ in range(max(overflow, 0)):
            self._evictable.popitem(last=False)
            self._evictions += 1
        self._anonymous += new_blocks
        held.extend([ANONYMOUS] * new_blocks)

    def promote(self, held: HeldBlocks, index: int, block_hash: int) -> bool:
        """Cache the full anonymous block ``held[index]`` under ``block_hash``; True if it was new."""
        if held[index] is not ANONYMOUS or self.contains(block_hash):
            return False
        self._anonymous -= 1
        self._refs[block_hash] = 1
        held[index] = block_hash
        return True

    def release(self, held: HeldBlocks) -> None:
        """Drop every reference in ``held`` (tail first) and empty it."""
        for block in reversed(held):
            if block is ANONYMOUS:
                self._anonymous -= 1
                continue
            remaining = self._refs[block] - 1
            if remaining:
                self._refs[block] = remaining
            else:
                del self._refs[block]
                self._evictable[block] = None
        held.clear()

    def reset(self) -> bool:
        """Drop every evictable block (vLLM ``/reset_prefix_cache``); False if any is pinned."""
        if self._refs or self._anonymous:
            return False
        self._evictable.clear()
        return True
