"""The prefix index: per endpoint, a bounded LRU of the block hashes it probably holds in KV cache.

Model: each endpoint's prefix cache is an LRU of KV blocks (vLLM evicts the least recently used
free block first, a sequence's tail before its head). The index mirrors that with an
:class:`BlockLRU` per endpoint, of ``capacity`` entries:

- **insert** (a request was sent there): its block hashes are touched tail first, so the head of
  every prompt is the most recent and is evicted last. Together with chained hashes this keeps
  the index **prefix-closed**: if block ``i`` of a chain is present, blocks ``0..i-1`` are too
  (every prompt holding ``i`` also holds ``0..i-1`` and touched them later). So
- **match** (how many leading blocks of a prompt are cached) is a binary search: about
  ``log2(blocks)`` dictionary look-ups per endpoint instead of a walk.
- **capacity** follows the endpoint's KV capacity (``scheduling/feedback.py`` converts tokens to
  blocks); :meth:`BlockLRU.resize` evicts down to a smaller one; :meth:`BlockLRU.clear` empties
  it when the endpoint restarts. Memory is bounded by the sum of capacities whatever the number
  of distinct prompts.
- **trim** drops a prompt's blocks from a given position on (the closed loop's correction when the
  endpoint reports fewer cached tokens than predicted); removing a tail keeps the closure.

Affinity keys (``prompt_cache_key``/``user``) live in the same LRU as single entries.

**Sharded**: one ``OrderedDict`` per LRU stalled the event loop. At a constant size under churn
CPython periodically rebuilds the dict and the ``OrderedDict``'s node table, O(entries): the
largest single insert of 125 new blocks took 2.2 / 10.3 / 50.1 ms at 16,384 / 65,536 / 262,144
blocks. So the entries are spread by hash (its low bits) over a power of two of shards, enough
for ``SHARD_BLOCKS`` entries a shard at capacity (8 at the default capacity, 128 at 262,144; one
under ``SHARD_BLOCKS``): a rebuild is one shard's. Each entry's value is one int, the touch stamp
(the Redis mirror's, or none) above a **sequence number** that strictly increases over the LRU's
touches (``stamp code << 64 | sequence``; a stamp ``s >= 0`` is stored as ``s + 1``, 0 meaning
unstamped). A shard is least recent first, so the global LRU order is the merge of the shards'
heads by sequence: a heap keeps one key per shard (``sequence << 16 | shard``), a lower bound of
its head's sequence, made exact lazily when it reaches the top (a head touched, trimmed or
expired since leaves a stale key). Eviction takes the heap's exact minimum one entry at a time
or, for at least one eviction per shard, first a bulk pass: every entry whose sequence is below
the smallest key + the overflow goes (at most the overflow of them, sequences being unique, and
older than all the others), shard by shard. Eviction order is exactly the one-dict LRU's.
The shard count grows with :meth:`BlockLRU.resize` (each shard split in order, O(entries), a
few times in an LRU's life at most) and never shrinks but on :meth:`BlockLRU.clear`.

**Out of the garbage collector's sight**: an LRU's entries are ints (hashes, and values packing
stamp and sequence), as are the heap's keys, which can never be part of a reference cycle, yet an ``OrderedDict`` is always tracked
by CPython's cyclic collector, and every full collection visits each of its keys: with the index
at its 262,144-block cap a full collection of the gateway took 18-29 ms (``gc.callbacks`` timing
under 200 KB prompts; 1M entries over four endpoints: about 4x), a stall of the event loop every
few seconds. :func:`untrack` takes the LRU's dict out of the collector (``PyObject_GC_UnTrack``,
CPython's C API, through ``ctypes``; a no-op where it is not available): reference counting still
frees it, and nothing else changes (every shard and the heap are untracked).
- **touch/expire** (the Redis store's mirror, ``state/redis_mirror.py``): insert with a write
  time per entry, and drop the oldest entries once older than the shared index's TTL.
Not thread-safe; used from the event loop only.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from heapq import heapify, heapreplace
from typing import TypeVar

DEFAULT_CAPACITY = 16_384
SHARD_BLOCKS = 2_048  # entries per shard at capacity at most (module doc, "Sharded")
MAX_SHARDS = 1_024
_SHARD_BITS = 16  # heap key: sequence << _SHARD_BITS | shard
_SEQ_BITS = 64  # entry value: stamp code << _SEQ_BITS | sequence
_SEQ_MASK = (1 << _SEQ_BITS) - 1
_STAMPS = ~_SEQ_MASK
_BULK = 1  # evictions per shard at or above which _evict takes a bulk pass first
_ABSENT = object()
_T = TypeVar("_T")

try:
    _gc_untrack = ctypes.pythonapi.PyObject_GC_UnTrack
    _gc_untrack.argtypes = [ctypes.py_object]
    _gc_untrack.restype = None
except (AttributeError, OSError):  # not CPython: leave the collector as it is
    _gc_untrack = None


def untrack(container: _T) -> _T:
    """``container`` taken out of the cyclic garbage collector's generations (see the module doc).

    Only for containers that hold nothing but atomic values (ints, None, strings, bytes) for their
    whole life: a container the collector does not see can never be freed as part of a cycle, so
    one holding another container could leak. CPython's ``PyObject_GC_UnTrack`` (safe on an object
    already untracked); returns ``container``; a no-op without ``ctypes.pythonapi``.
    """
    if _gc_untrack is not None:
        _gc_untrack(container)
    return container


def _code(stamp: int) -> int:
    """A stamp as stored above an entry's sequence: 0 is "unstamped", so a stamp >= 0 is stored + 1."""
    return stamp + 1 if stamp >= 0 else stamp


def _shards_for(capacity: int) -> int:
    """The shard count for ``capacity``: a power of two, ``SHARD_BLOCKS`` entries a shard at most."""
    count = 1
    while count < MAX_SHARDS and capacity > count * SHARD_BLOCKS:
        count *= 2
    return count


class BlockLRU:
    """A bounded LRU set of block hashes, sharded by hash (module doc, "Sharded")."""

    __slots__ = ("capacity", "_shards", "_mask", "_heap", "_seq", "_size", "_fixed")

    def __init__(self, capacity: int = DEFAULT_CAPACITY, shards: int | None = None) -> None:
        """``shards``: a fixed shard count (a power of two; tests), else it follows ``capacity``."""
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        if shards is not None and (shards < 1 or shards & (shards - 1) or shards > MAX_SHARDS):
            raise ValueError(f"shards must be a power of two <= {MAX_SHARDS}")
        self.capacity = capacity
        self._fixed = shards is not None
        self._seq = self._size = 0  # _seq: the next entry's sequence number
        self._layout(shards or _shards_for(capacity))

    def _layout(self, count: int) -> None:
        """(Re)build ``count`` shards, splitting the current ones: each new shard takes its entries
        from one old shard, in order, so every shard stays least recent first (O(entries))."""
        old = getattr(self, "_shards", ())
        # hash -> stamp code << _SEQ_BITS | sequence, least recent first; ints only (module doc)
        self._shards: tuple[OrderedDict[int, int], ...] = tuple(untrack(OrderedDict()) for _ in range(count))
        self._mask = mask = count - 1
        for shard in old:
            for block, value in shard.items():
                self._shards[block & mask][block] = value
        # one key per shard, seq << _SHARD_BITS | shard: a lower bound of its head's sequence
        fresh = self._seq << _SHARD_BITS
        self._heap = untrack([fresh | i for i in range(count)])
        for i, shard in enumerate(self._shards):
            for value in shard.values():
                self._heap[i] = (value & _SEQ_MASK) << _SHARD_BITS | i
                break
        heapify(self._heap)

    def __len__(self) -> int:
        return self._size

    def __contains__(self, block: int) -> bool:
        return block in self._shards[block & self._mask]

    def match(self, hashes: Sequence[int]) -> int:
        """Number of leading ``hashes`` present (binary search over the prefix-closed set)."""
        shards, mask = self._shards, self._mask
        if not hashes:
            return 0
        block = hashes[0]
        if block not in shards[block & mask]:
            return 0
        block = hashes[-1]
        if block in shards[block & mask]:
            return len(hashes)
        low, high = 1, len(hashes) - 1  # hashes[low - 1] present, hashes[high] absent
        while low < high:
            middle = (low + high) // 2
            block = hashes[middle]
            if block in shards[block & mask]:
                low = middle + 1
            else:
                high = middle
        return low

    def insert(self, hashes: Sequence[int], extra: Iterable[int] = ()) -> None:
        """Touch ``hashes`` tail first (head most recent), then ``extra``; evict over capacity.
        A new entry is unstamped; an existing one keeps its stamp."""
        shards, mask, seq, added = self._shards, self._mask, self._seq, 0
        for blocks in (reversed(hashes), extra):
            for block in blocks:
                shard = shards[block & mask]
                value = shard.get(block)
                if value is None:
                    shard[block] = seq
                    added += 1
                else:
                    shard[block] = value & _STAMPS | seq
                    shard.move_to_end(block)
                seq += 1
        self._seq = seq
        self._size += added
        self._evict()

    def touch(self, hashes: Sequence[int], extra: Iterable[int], stamp: int) -> None:
        """:meth:`insert` that also stamps each entry with ``stamp`` (a write time, ms) for :meth:`expire`."""
        shards, mask, seq, added, high = self._shards, self._mask, self._seq, 0, _code(stamp) << _SEQ_BITS
        for blocks in (reversed(hashes), extra):
            for block in blocks:
                shard = shards[block & mask]
                if block in shard:
                    shard[block] = high | seq  # an existing entry keeps its place: move it
                    shard.move_to_end(block)
                else:
                    shard[block] = high | seq
                    added += 1
                seq += 1
        self._seq = seq
        self._size += added
        self._evict()

    def load(self, stamped: Iterable[tuple[int, int]]) -> None:
        """Append ``(hash, stamp)`` pairs given least recent first (a snapshot), then evict."""
        shards, mask, seq, added = self._shards, self._mask, self._seq, 0
        for block, stamp in stamped:
            shard = shards[block & mask]
            if block not in shard:
                added += 1
            shard[block] = _code(stamp) << _SEQ_BITS | seq  # an existing entry keeps its place: move it
            shard.move_to_end(block)
            seq += 1
        self._seq = seq
        self._size += added
        self._evict()

    def expire(self, before: int) -> int:
        """Drop the least recent entries stamped before ``before`` (stops at the first newer or
        unstamped one); returns how many went."""
        dropped = 0
        while self._size:
            shard = self._oldest()
            for value in shard.values():
                break
            code = value >> _SEQ_BITS
            if code == 0 or (code - 1 if code > 0 else code) >= before:
                break
            shard.popitem(last=False)
            self._size -= 1
            dropped += 1
        return dropped

    def trim(self, hashes: Sequence[int], keep: int) -> int:
        """Remove ``hashes[keep:]``; returns how many were present."""
        shards, mask, removed = self._shards, self._mask, 0
        for block in hashes[max(keep, 0) :]:
            if shards[block & mask].pop(block, _ABSENT) is not _ABSENT:
                removed += 1
        self._size -= removed  # a shard's heap key stays a lower bound of its new head
        return removed

    def resize(self, capacity: int) -> None:
        """Set a new capacity, evicting the least recent entries over it (more shards if it grew)."""
        self.capacity = max(1, int(capacity))
        self._evict()
        if not self._fixed and _shards_for(self.capacity) > len(self._shards):
            self._layout(_shards_for(self.capacity))

    def clear(self) -> None:
        count = len(self._shards) if self._fixed else _shards_for(self.capacity)
        self._seq = self._size = 0
        self._shards = ()
        self._layout(count)

    def entries(self) -> list[tuple[int, int | None]]:
        """Every ``(hash, stamp or None)``, least recent first (a copy: O(n log n), for tests and tools)."""
        items = sorted((value & _SEQ_MASK, block, value >> _SEQ_BITS) for shard in self._shards for block, value in shard.items())
        return [(block, None if code == 0 else code - 1 if code > 0 else code) for _, block, code in items]

    @property
    def _entries(self) -> OrderedDict[int, int | None]:
        """:meth:`entries` as an (untracked) ``OrderedDict``: the single-dict view of earlier versions."""
        return untrack(OrderedDict(self.entries()))

    def _oldest(self) -> OrderedDict[int, int]:
        """The shard whose head is the globally least recent entry (the LRU is not empty); its heap
        key is then exact. A stale key (its head was touched or trimmed since) is raised and retried."""
        heap, shards, mask = self._heap, self._shards, self._mask
        while True:
            key = heap[0]
            shard = shards[key & mask]
            for value in shard.values():
                if value & _SEQ_MASK == key >> _SHARD_BITS:
                    return shard
                heapreplace(heap, (value & _SEQ_MASK) << _SHARD_BITS | key & mask)
                break
            else:  # empty: any future head is at least as new as the next sequence
                heapreplace(heap, self._seq << _SHARD_BITS | key & mask)

    def _evict(self) -> None:
        overflow = self._size - self.capacity
        if overflow <= 0:
            return
        self._size -= overflow
        if self._mask == 0:  # one shard: it is the order
            popitem = self._shards[0].popitem
            for _ in range(overflow):
                popitem(last=False)
            return
        if overflow >= _BULK * len(self._shards):
            overflow = self._evict_bulk(overflow)
        self._evict_each(overflow)

    def _evict_bulk(self, overflow: int) -> int:
        """Evict every entry older than the smallest heap key + ``overflow``, shard by shard: sequences
        are unique, so at most ``overflow`` of them, all older than any other entry. Returns how
        many evictions are left; every heap key is exact or fresh after it."""
        heap, shards, mask = self._heap, self._shards, self._mask
        fresh, bound, keys = self._seq << _SHARD_BITS, (heap[0] >> _SHARD_BITS) + overflow, []
        for key in heap:
            if key >> _SHARD_BITS < bound:
                shard, count = shards[key & mask], 0
                for value in shard.values():
                    if value & _SEQ_MASK >= bound:  # the shard's new head
                        key = (value & _SEQ_MASK) << _SHARD_BITS | key & mask
                        break
                    count += 1
                else:
                    key = fresh | key & mask
                popitem = shard.popitem
                for _ in range(count):
                    popitem(last=False)
                overflow -= count
            keys.append(key)
        heap[:] = keys
        heapify(heap)
        return overflow

    def _evict_each(self, overflow: int) -> None:
        """Evict ``overflow`` entries one at a time: the heap's exact minimum, its key then raised to
        the shard's new head (a stale key: the head goes back and the key is made exact)."""
        heap, shards, mask, fresh = self._heap, self._shards, self._mask, self._seq << _SHARD_BITS
        while overflow > 0:
            key = heap[0]
            shard = shards[key & mask]
            if shard:
                block, value = shard.popitem(last=False)
                if value & _SEQ_MASK == key >> _SHARD_BITS:  # the global oldest: evicted
                    overflow -= 1
                    for value in shard.values():
                        heapreplace(heap, (value & _SEQ_MASK) << _SHARD_BITS | key & mask)
                        break
                    else:
                        heapreplace(heap, fresh | key & mask)
                    continue
                shard[block] = value
                shard.move_to_end(block, last=False)
                heapreplace(heap, (value & _SEQ_MASK) << _SHARD_BITS | key & mask)
            else:
                heapreplace(heap, fresh | key & mask)


class PrefixIndex:
    """One :class:`BlockLRU` per endpoint name, created on first use at the default capacity."""

    __slots__ = ("_default", "_lrus")

    def __init__(self, default_capacity: int = DEFAULT_CAPACITY) -> None:
        self._default = default_capacity
        self._lrus: dict[str, BlockLRU] = {}

    def lru(self, endpoint: str) -> BlockLRU:
        lru = self._lrus.get(endpoint)
        if lru is None:
            lru = self._lrus[endpoint] = BlockLRU(self._default)
        return lru

    def peek(self, endpoint: str) -> BlockLRU | None:
        """The endpoint's LRU if it has one (never creates)."""
        return self._lrus.get(endpoint)

    def match_all(self, names: Sequence[str], blocks: Sequence[int], affinity: int | None) -> tuple[dict[str, int], list[str]]:
        """Matched leading blocks per endpoint name, and the names holding ``affinity`` (one pass)."""
        lrus = self._lrus
        matched: dict[str, int] = {}
        holding: list[str] = []
        for name in names:
            lru = lrus.get(name)
            if lru is None:
                matched[name] = 0
                continue
            matched[name] = lru.match(blocks)
            if affinity is not None and affinity in lru:
                holding.append(name)
        return matched, holding

    def names(self) -> list[str]:
        return list(self._lrus)

    def drop(self, endpoint: str) -> None:
        """Forget an endpoint entirely (removed from the registry)."""
        self._lrus.pop(endpoint, None)
