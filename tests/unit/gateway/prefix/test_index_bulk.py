"""The index's bulk dict operations equal the per-key OrderedDict definition they replaced.

``BlockLRU`` once touched, moved and evicted one key per Python iteration on an ``OrderedDict``;
it now runs each as one C-level pass on the same ``OrderedDict`` (``gateway/prefix/index.py``,
``_renew``). The reference below is the old code, operation for operation; random sequences of
every operation (repeated keys included, which the bulk pass must put right) must leave the same
entries, values and order, and answer the same.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import given, settings
from hypothesis import strategies as st

import gateway.prefix.index as index
from gateway.prefix.index import BlockLRU


@contextmanager
def bulk_from(blocks: int) -> Iterator[None]:
    """Chains of at least ``blocks`` blocks take the bulk passes (1: every chain; the default 64
    would leave these small examples on the per-key loop)."""
    default, index.BULK_BLOCKS = index.BULK_BLOCKS, blocks
    try:
        yield
    finally:
        index.BULK_BLOCKS = default


class ReferenceLRU:
    """The per-key definition (the OrderedDict implementation before the bulk passes)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.entries: OrderedDict[int, int | None] = OrderedDict()

    def insert(self, hashes: Sequence[int], extra: Iterable[int] = ()) -> None:
        for block in [*reversed(hashes), *extra]:
            if block in self.entries:
                self.entries.move_to_end(block)
            else:
                self.entries[block] = None
        self._evict()

    def touch(self, hashes: Sequence[int], extra: Iterable[int], stamp: int) -> None:
        for block in [*reversed(hashes), *extra]:
            self.entries[block] = stamp
            self.entries.move_to_end(block)
        self._evict()

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

    def resize(self, capacity: int) -> None:
        self.capacity = max(1, int(capacity))
        self._evict()

    def _evict(self) -> None:
        while len(self.entries) > self.capacity:
            self.entries.popitem(last=False)


def _trim(reference: ReferenceLRU, hashes: Sequence[int], keep: int) -> int:
    removed = 0
    for block in hashes[max(keep, 0) :]:
        if block in reference.entries:
            del reference.entries[block]
            removed += 1
    return removed


keys = st.integers(min_value=0, max_value=40)  # a small key space: repeats and re-touches are common
chains = st.lists(keys, max_size=24)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), chains, st.lists(keys, max_size=2)),
        st.tuples(st.just("touch"), chains, st.lists(keys, max_size=2), st.integers(0, 50)),
        st.tuples(st.just("load"), st.lists(st.tuples(keys, st.integers(0, 50)), max_size=12)),
        st.tuples(st.just("expire"), st.integers(0, 60)),
        st.tuples(st.just("trim"), chains, st.integers(-2, 10)),
        st.tuples(st.just("resize"), st.integers(0, 40)),
        st.tuples(st.just("match"), chains),
    ),
    max_size=30,
)


@settings(max_examples=400, deadline=None)
@given(capacity=st.integers(1, 30), ops=operations, bulk=st.sampled_from([1, 4, 64]))
def test_bulk_operations_equal_the_per_key_definition(capacity: int, ops: list[tuple], bulk: int) -> None:
    with bulk_from(bulk):
        _play(capacity, ops)


def _play(capacity: int, ops: list[tuple]) -> None:
    lru, reference = BlockLRU(capacity), ReferenceLRU(capacity)
    for op in ops:
        name, args = op[0], op[1:]
        if name == "trim":
            assert lru.trim(*args) == _trim(reference, *args)
        elif name == "match":
            assert lru.match(args[0]) == BlockLRU.match(_as_lru(reference), args[0])
        else:
            answer = getattr(lru, name)(*args)
            assert answer == getattr(reference, name)(*args)
        assert list(lru._entries.items()) == list(reference.entries.items())
        assert len(lru) == len(reference.entries) <= lru.capacity


def _as_lru(reference: ReferenceLRU) -> BlockLRU:
    """A BlockLRU holding the reference's entries, to run the (unchanged) binary-search match."""
    lru = BlockLRU(max(1, len(reference.entries)))
    lru._entries = dict(reference.entries)
    return lru


def test_a_long_chain_inserted_over_a_full_index_evicts_the_oldest_in_one_pass() -> None:
    assert index.BULK_BLOCKS <= 781
    lru, reference = BlockLRU(2_000), ReferenceLRU(2_000)
    for seed in range(6):  # unique 781-block prompts, as a 200 KB chat body gives
        chain = [seed * 10_000 + i for i in range(781)]
        lru.insert(chain, (seed,))
        reference.insert(chain, (seed,))
        assert list(lru._entries) == list(reference.entries)
    assert len(lru) == 2_000
    assert lru.match([5 * 10_000 + i for i in range(781)]) == 781


# Real chains: prompts share heads (a system prompt, a conversation's earlier turns) and end in
# blocks of their own, so the index usually is what the one-pass path expects; trims and small
# capacities break the prefix closure now and then, which the checks must catch.
heads = st.integers(0, 3)
prompts = st.tuples(heads, st.integers(0, 12), st.integers(0, 6), st.integers(0, 5))  # head, shared, own, tag


def _chain(head: int, shared: int, own: int, tag: int) -> list[int]:
    return [1000 * head + i for i in range(shared)] + [100_000 + 1000 * tag + 100 * head + shared + i for i in range(own)]


chain_operations = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), prompts, st.lists(st.integers(0, 3), max_size=1)),
        st.tuples(st.just("touch"), prompts, st.lists(st.integers(0, 3), max_size=1), st.integers(0, 50)),
        st.tuples(st.just("trim"), prompts, st.integers(0, 8)),
        st.tuples(st.just("expire"), st.integers(0, 60)),
    ),
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(capacity=st.integers(1, 60), ops=chain_operations, stamped_first=st.booleans(), bulk=st.sampled_from([1, 8, 64]))
def test_shared_head_chains_equal_the_per_key_definition(capacity: int, ops: list[tuple], stamped_first: bool, bulk: int) -> None:
    with bulk_from(bulk):
        _play_chains(capacity, ops, stamped_first)


def _play_chains(capacity: int, ops: list[tuple], stamped_first: bool) -> None:
    lru, reference = BlockLRU(capacity), ReferenceLRU(capacity)
    if stamped_first:  # a stamped index: inserts take the two-pass form
        lru.touch([7_777_777], (), 1)
        reference.touch([7_777_777], (), 1)
    for op in ops:
        name, args = op[0], op[1:]
        hashes = _chain(*args[0]) if name != "expire" else []
        if name == "insert":
            lru.insert(hashes, args[1])
            reference.insert(hashes, args[1])
        elif name == "touch":
            lru.touch(hashes, args[1], args[2])
            reference.touch(hashes, args[1], args[2])
        elif name == "trim":
            assert lru.trim(hashes, args[1]) == _trim(reference, hashes, args[1])
        else:
            assert lru.expire(args[0]) == reference.expire(args[0])
        assert list(lru._entries.items()) == list(reference.entries.items())


def test_the_one_pass_path_serves_unique_and_shared_head_prompts(monkeypatch) -> None:
    fallbacks = []
    real = index._renew
    monkeypatch.setattr(index, "_renew", lambda *args: (fallbacks.append(args), real(*args)))
    monkeypatch.setattr(index, "BULK_BLOCKS", 16)
    lru = BlockLRU(500)
    system = list(range(32))
    for tag in range(40):  # a shared system prompt, then a question of its own; evicting from the 10th on
        lru.insert(system + [10_000 * (tag + 1) + i for i in range(20)], (tag,))
    assert fallbacks == []
    assert lru.match(system) == 32
    last = system + [10_000 * 40 + i for i in range(20)]
    lru.trim(system, 10)  # the system prompt's blocks 10-31 go, the last question's stay: no closure
    lru.insert(last)  # match() answers 52 (first and last present): moving block 10 fails, caught
    assert len(fallbacks) == 1
    assert list(lru._entries)[-52:] == last[::-1]
