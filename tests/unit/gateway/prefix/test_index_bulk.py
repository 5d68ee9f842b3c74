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

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.prefix.index import BlockLRU


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
@given(capacity=st.integers(1, 30), ops=operations)
def test_bulk_operations_equal_the_per_key_definition(capacity: int, ops: list[tuple]) -> None:
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
    lru, reference = BlockLRU(2_000), ReferenceLRU(2_000)
    for seed in range(6):  # unique 781-block prompts, as a 200 KB chat body gives
        chain = [seed * 10_000 + i for i in range(781)]
        lru.insert(chain, (seed,))
        reference.insert(chain, (seed,))
        assert list(lru._entries) == list(reference.entries)
    assert len(lru) == 2_000
    assert lru.match([5 * 10_000 + i for i in range(781)]) == 781
