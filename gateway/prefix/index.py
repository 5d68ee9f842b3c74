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

**Out of the garbage collector's sight**: an LRU's entries are ints (hashes) and ints or None
(stamps), which can never be part of a reference cycle, yet an ``OrderedDict`` is always tracked
by CPython's cyclic collector, and every full collection visits each of its keys: with the index
at its 262,144-block cap a full collection of the gateway took 18-29 ms (``gc.callbacks`` timing
under 200 KB prompts; 1M entries over four endpoints: about 4x), a stall of the event loop every
few seconds. :func:`untrack` takes the LRU's dict out of the collector (``PyObject_GC_UnTrack``,
CPython's C API, through ``ctypes``; a no-op where it is not available): reference counting still
frees it, and nothing else changes.
- **touch/expire** (the Redis store's mirror, ``state/redis_mirror.py``): insert with a write
  time per entry, and drop the oldest entries once older than the shared index's TTL.
Not thread-safe; used from the event loop only.

**Native by default**: :data:`BlockLRU` is ``gateway.prefix._lru.BlockLRU`` (``_lru.c``, built
by ``pip install`` where a C compiler is found) with :class:`PyBlockLRU`'s exact semantics: flat
node arrays recycled once full and an open-addressing table that deletes by backward shift, so an
index at its capacity never rebuilds a table (the ``OrderedDict``'s rebuilds stalled the loop
11-50 ms at 262,144 entries, docs/overhead.md), about 32 bytes per entry against ~200, and no
object for the collector to walk. Its keys must be ints in ``[0, 2**64)`` (block hashes are
``xxh3_64``): others raise ``TypeError``/``OverflowError`` on insert, touch and load. Where it is
not built, or with ``KVGATE_NATIVE_LRU=0`` in the environment, :data:`BlockLRU` is
:class:`PyBlockLRU`; :data:`NATIVE` says which. ``tests/unit/gateway/prefix/test_native_lru.py``
replays random operations on both and compares every answer and state.
"""

from __future__ import annotations

import ctypes
import os
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import TypeVar

DEFAULT_CAPACITY = 16_384
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


class PyBlockLRU:
    """A bounded LRU set of block hashes (most recent last); the reference for the native one."""

    __slots__ = ("capacity", "_entries")

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        self.capacity = capacity
        # value: write stamp (touch) or None; ints only, so out of the collector's sight (module doc)
        self._entries: OrderedDict[int, int | None] = untrack(OrderedDict())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, block: int) -> bool:
        return block in self._entries

    def match(self, hashes: Sequence[int]) -> int:
        """Number of leading ``hashes`` present (binary search over the prefix-closed set)."""
        entries = self._entries
        if not hashes or hashes[0] not in entries:
            return 0
        if hashes[-1] in entries:
            return len(hashes)
        low, high = 1, len(hashes) - 1  # hashes[low - 1] present, hashes[high] absent
        while low < high:
            middle = (low + high) // 2
            if hashes[middle] in entries:
                low = middle + 1
            else:
                high = middle
        return low

    def insert(self, hashes: Sequence[int], extra: Iterable[int] = ()) -> None:
        """Touch ``hashes`` tail first (head most recent), then ``extra``; evict over capacity."""
        entries = self._entries
        move = entries.move_to_end
        for block in reversed(hashes):
            if block in entries:
                move(block)
            else:
                entries[block] = None
        for block in extra:
            if block in entries:
                move(block)
            else:
                entries[block] = None
        self._evict()

    def touch(self, hashes: Sequence[int], extra: Iterable[int], stamp: int) -> None:
        """:meth:`insert` that also stamps each entry with ``stamp`` (a write time, ms) for :meth:`expire`."""
        entries = self._entries
        move = entries.move_to_end
        for block in reversed(hashes):
            entries[block] = stamp  # an existing entry keeps its place: move it
            move(block)
        for block in extra:
            entries[block] = stamp
            move(block)
        self._evict()

    def load(self, stamped: Iterable[tuple[int, int]]) -> None:
        """Append ``(hash, stamp)`` pairs given least recent first (a snapshot), then evict."""
        entries = self._entries
        for block, stamp in stamped:
            entries[block] = stamp
            entries.move_to_end(block)
        self._evict()

    def expire(self, before: int) -> int:
        """Drop the least recent entries stamped before ``before`` (stops at the first newer or
        unstamped one); returns how many went."""
        entries = self._entries
        dropped = 0
        while entries:
            stamp = entries[next(iter(entries))]
            if stamp is None or stamp >= before:
                break
            entries.popitem(last=False)
            dropped += 1
        return dropped

    def trim(self, hashes: Sequence[int], keep: int) -> int:
        """Remove ``hashes[keep:]``; returns how many were present."""
        removed = 0
        for block in hashes[max(keep, 0) :]:
            if self._entries.pop(block, _ABSENT) is not _ABSENT:
                removed += 1
        return removed

    def resize(self, capacity: int) -> None:
        """Set a new capacity, evicting the least recent entries over it."""
        self.capacity = max(1, int(capacity))
        self._evict()

    def clear(self) -> None:
        self._entries.clear()

    def items(self) -> list[tuple[int, int | None]]:
        """``(hash, stamp or None)`` pairs, least recent first."""
        return list(self._entries.items())

    def _evict(self) -> None:
        entries = self._entries
        overflow = len(entries) - self.capacity
        for _ in range(overflow if overflow > 0 else 0):
            entries.popitem(last=False)


try:
    from gateway.prefix._lru import BlockLRU as _NativeBlockLRU
except ImportError:  # not built (no C compiler at install): the pure-Python one
    _NativeBlockLRU = None

NATIVE = _NativeBlockLRU is not None and os.environ.get("KVGATE_NATIVE_LRU", "1") != "0"
BlockLRU: type[PyBlockLRU] = _NativeBlockLRU if NATIVE else PyBlockLRU  # type: ignore[assignment]


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
