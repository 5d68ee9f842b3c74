"""The sharded BlockLRU against a one-OrderedDict reference: eviction exactly global LRU, at
capacities that use several shards (fixed, and following resize), stamps and expiry included."""

from __future__ import annotations

import gc
import random
import sys
from collections import OrderedDict
from collections.abc import Iterable, Sequence

import pytest

from gateway.prefix import index as index_module
from gateway.prefix.index import BlockLRU

_ABSENT = object()


class Reference:
    """The single-OrderedDict LRU the sharded one replaces (same operations, same semantics)."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.entries = capacity, OrderedDict[int, int | None]()

    def insert(self, hashes: Sequence[int], extra: Iterable[int] = ()) -> None:
        for block in [*reversed(hashes), *extra]:
            if block in self.entries:
                self.entries.move_to_end(block)
            else:
                self.entries[block] = None
        self._evict()

    def touch(self, hashes: Sequence[int], extra: Iterable[int], stamp: int) -> None:
        self.load((block, stamp) for block in [*reversed(hashes), *extra])

    def load(self, stamped: Iterable[tuple[int, int]]) -> None:
        for block, stamp in stamped:
            self.entries[block] = stamp
            self.entries.move_to_end(block)
        self._evict()

    def expire(self, before: int) -> int:
        dropped = 0
        while self.entries:
            stamp = self.entries[next(iter(self.entries))]
            if stamp is None or stamp >= before:
                break
            self.entries.popitem(last=False)
            dropped += 1
        return dropped

    def trim(self, hashes: Sequence[int], keep: int) -> int:
        return sum(self.entries.pop(block, _ABSENT) is not _ABSENT for block in hashes[max(keep, 0) :])

    def resize(self, capacity: int) -> None:
        self.capacity = max(1, int(capacity))
        self._evict()

    def clear(self) -> None:
        self.entries.clear()

    def _evict(self) -> None:
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)


def _drive(lru: BlockLRU, ref: Reference, rng: random.Random, steps: int, keys: int, resize_to: Sequence[int] = ()) -> None:
    stamp = 1_000
    for step in range(steps):
        op = rng.random()
        hashes = [rng.randrange(keys) for _ in range(rng.choice((1, 3, 20, 150, 700)))]
        if rng.random() < 0.3:  # chains sharing a head, as prompts do
            hashes = list(range(rng.randrange(1, 40))) + hashes
        extra = (rng.randrange(keys),) if rng.random() < 0.3 else ()
        if op < 0.45:
            lru.insert(hashes, extra)
            ref.insert(hashes, extra)
        elif op < 0.7:
            stamp += rng.randrange(0, 50)
            lru.touch(hashes, extra, stamp)
            ref.touch(hashes, extra, stamp)
        elif op < 0.75:
            pairs = [(block, stamp + rng.randrange(-5, 5)) for block in hashes]
            lru.load(pairs)
            ref.load(pairs)
        elif op < 0.83:
            keep = rng.randrange(-2, len(hashes) + 2)
            assert lru.trim(hashes, keep) == ref.trim(hashes, keep)
        elif op < 0.9:
            before = stamp - rng.randrange(0, 400)
            assert lru.expire(before) == ref.expire(before)
        elif op < 0.97 and resize_to:
            capacity = rng.choice(resize_to)
            lru.resize(capacity)
            ref.resize(capacity)
        elif op < 0.975:
            lru.clear()
            ref.clear()
        assert len(lru) == len(ref.entries) <= lru.capacity
        probe = hashes[: 8] + [keys + 1]
        assert [block in lru for block in probe] == [block in ref.entries for block in probe]
        if step % 10 == 0 or step == steps - 1:
            assert lru.entries() == list(ref.entries.items()), f"step {step}"


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("capacity", "shards"), [(3, 4), (8, 8), (50, 8), (400, 16), (2_000, 64)])
def test_fixed_shards_evict_exactly_the_global_least_recent(seed: int, capacity: int, shards: int) -> None:
    rng = random.Random(seed)
    _drive(BlockLRU(capacity, shards=shards), Reference(capacity), rng, steps=300, keys=capacity * 3)


@pytest.mark.parametrize("seed", range(4))
def test_shards_follow_the_capacity_and_a_split_keeps_the_order(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "SHARD_BLOCKS", 16)
    lru, ref = BlockLRU(40), Reference(40)
    assert len(lru._shards) == 4
    _drive(lru, ref, random.Random(seed), steps=400, keys=3_000, resize_to=(5, 40, 300, 1_000, 2_500))
    assert len(lru._shards) == 256 or lru.capacity < 2_500  # grown with the capacity (never shrinks)


@pytest.mark.parametrize("seed", range(3))
def test_a_split_keeps_each_shards_order_for_the_evictions_after_it(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index_module, "SHARD_BLOCKS", 16)
    rng = random.Random(seed)
    lru, ref = BlockLRU(60), Reference(60)
    for capacity in (60, 200, 900):
        lru.resize(capacity)
        ref.resize(capacity)
        assert len(lru._shards) == index_module._shards_for(capacity)
        for _ in range(40):  # fill past the capacity: evictions right after each split
            hashes = [rng.randrange(5_000) for _ in range(rng.choice((1, 7, 40)))]
            lru.insert(hashes)
            ref.insert(hashes)
            assert lru.entries() == list(ref.entries.items())


def test_default_capacity_uses_several_shards_and_evicts_globally() -> None:
    rng = random.Random(7)
    lru, ref = BlockLRU(), Reference(index_module.DEFAULT_CAPACITY)
    assert len(lru._shards) == index_module.DEFAULT_CAPACITY // index_module.SHARD_BLOCKS
    for _ in range(150):
        hashes = [rng.getrandbits(64) for _ in range(rng.choice((125, 781)))]
        head = list(range(rng.randrange(50)))  # a shared head, touched again and again
        lru.insert(head + hashes)
        ref.insert(head + hashes)
    assert lru.entries() == list(ref.entries.items())


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="PyObject_GC_UnTrack is CPython's")
def test_every_shard_and_the_heap_stay_out_of_the_collectors_sight() -> None:
    lru = BlockLRU(64, shards=8)
    lru.insert(list(range(100)), extra=(2**70,))
    lru.touch(list(range(50)), (), stamp=5)
    lru.resize(10)
    lru.clear()
    lru.insert(list(range(30)))
    gc.collect()
    assert not any(gc.is_tracked(shard) for shard in lru._shards) and not gc.is_tracked(lru._heap)


def test_a_shard_count_must_be_a_power_of_two() -> None:
    for shards in (0, 3, 2 * index_module.MAX_SHARDS):
        with pytest.raises(ValueError):
            BlockLRU(10, shards=shards)
