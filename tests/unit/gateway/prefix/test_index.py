"""The prefix index: LRU order, prefix closure, binary-search match, resize, clear, memory bound.

Every test runs on both LRUs: the native one (``gateway.prefix._lru``, where built) and the
pure-Python reference (``PyBlockLRU``).
"""

from __future__ import annotations

import gc
import sys

import pytest

import gateway.prefix.index as index_module
from gateway.prefix.index import BlockLRU, PrefixIndex, PyBlockLRU, untrack

_IMPLS = [pytest.param(PyBlockLRU, id="python")]
if index_module._NativeBlockLRU is not None:
    _IMPLS.append(pytest.param(index_module._NativeBlockLRU, id="native"))


@pytest.fixture(autouse=True, params=_IMPLS)
def lru_impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> type:
    """``BlockLRU`` here and in the index module is each implementation in turn."""
    monkeypatch.setitem(globals(), "BlockLRU", request.param)
    monkeypatch.setattr(index_module, "BlockLRU", request.param)
    return request.param


def chain(tag: int, n: int, shared: int = 0) -> list[int]:
    """``n`` block hashes; the first ``shared`` are common to every tag."""
    return [i if i < shared else tag * 1_000_000 + i for i in range(n)]


@pytest.mark.parametrize(
    ("inserted", "query", "expected"),
    [
        ([chain(1, 10)], chain(1, 10), 10),
        ([chain(1, 10)], chain(1, 20), 10),
        ([chain(1, 10)], chain(1, 4), 4),
        ([chain(1, 10)], chain(2, 10), 0),
        ([chain(1, 10, shared=6)], chain(2, 10, shared=6), 6),
        ([], chain(1, 3), 0),
        ([chain(1, 10)], [], 0),
    ],
)
def test_match_counts_leading_blocks(inserted: list[list[int]], query: list[int], expected: int) -> None:
    lru = BlockLRU(100)
    for hashes in inserted:
        lru.insert(hashes)
    assert lru.match(query) == expected


def test_eviction_takes_tails_first_so_the_index_stays_prefix_closed() -> None:
    lru = BlockLRU(12)
    lru.insert(chain(1, 10))
    lru.insert(chain(2, 6))  # 4 of prompt 1's blocks must go: its tail
    assert len(lru) == 12
    assert lru.match(chain(1, 10)) == 6
    assert all(block in lru for block in chain(1, 6))
    assert lru.match(chain(2, 6)) == 6


def test_a_shared_head_is_refreshed_by_every_prompt_that_uses_it() -> None:
    lru = BlockLRU(14)
    lru.insert(chain(1, 8, shared=4))
    for tag in range(2, 6):
        lru.insert(chain(tag, 8, shared=4))
    assert lru.match(chain(9, 8, shared=4)) == 4


def test_resize_evicts_least_recent_and_clear_empties() -> None:
    lru = BlockLRU(100)
    lru.insert(chain(1, 10))
    lru.insert(chain(2, 10))
    lru.resize(10)
    assert len(lru) == 10 and lru.match(chain(2, 10)) == 10 and lru.match(chain(1, 10)) == 0
    lru.clear()
    assert len(lru) == 0


def test_memory_stays_bounded_whatever_the_number_of_prompts() -> None:
    index = PrefixIndex(default_capacity=500)
    for tag in range(2000):
        index.lru("e0").insert(chain(tag, 30), extra=(tag,))
    assert len(index.lru("e0")) == 500


def test_trim_removes_a_tail_and_affinity_entries_live_in_the_same_lru() -> None:
    lru = BlockLRU(100)
    lru.insert(chain(1, 10), extra=(42,))
    assert 42 in lru
    assert lru.trim(chain(1, 10), 7) == 3
    assert lru.match(chain(1, 10)) == 7
    with pytest.raises(ValueError):
        BlockLRU(0)


def test_index_per_endpoint() -> None:
    index = PrefixIndex(10)
    index.lru("a").insert([1, 2])
    assert index.peek("b") is None and index.names() == ["a"]
    index.drop("a")
    assert index.peek("a") is None


def test_touch_stamps_entries_and_expire_drops_the_oldest_first() -> None:
    lru = BlockLRU(10)
    lru.touch([1, 2, 3], (), 100)  # tail first: 3 is the least recent
    lru.touch([4, 5], (9,), 200)
    lru.touch([1], (), 300)  # a touch moves and restamps
    assert lru.expire(150) == 2 and len(lru) == 4  # 3 and 2 (stamped 100); 1 was restamped
    assert 1 in lru and 3 not in lru and 2 not in lru
    assert lru.expire(250) == 3 and [h for h, _ in lru.items()] == [1]
    lru.insert([7])  # an unstamped entry stops expiry
    assert lru.expire(10_000) == 1 and [h for h, _ in lru.items()] == [7]
    assert lru.trim([7], 0) == 1 and len(lru) == 0


def test_load_appends_a_snapshot_in_order_and_evicts_over_capacity() -> None:
    lru = BlockLRU(3)
    lru.load([(1, 10), (2, 20), (3, 30), (4, 40)])
    assert lru.items() == [(2, 20), (3, 30), (4, 40)]


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="PyObject_GC_UnTrack is CPython's")
def test_an_lru_is_out_of_the_cyclic_collectors_sight_and_works_the_same() -> None:
    """Its entries are ints: a full collection need not visit them (prefix/index.py, untrack)."""
    lru = BlockLRU(4)
    held = getattr(lru, "_entries", lru)  # the Python one's OrderedDict; the native object itself
    assert not gc.is_tracked(held)
    lru.insert([1, 2, 3])
    lru.touch([1, 2], [9], stamp=5)
    lru.insert([7, 8])
    assert not gc.is_tracked(held)  # inserting ints never tracks it again
    assert lru.match([1, 2, 3]) == 1 and 2 not in lru and 3 not in lru and len(lru) == 4  # 3 and 2 were the oldest
    gc.collect()
    assert lru.match([1, 2]) == 1 and lru.match([7, 8]) == 2 and 9 in lru


def test_untrack_returns_the_container() -> None:
    entries: set[int] = {1, 2}
    assert untrack(entries) is entries and entries == {1, 2}
