"""Block pool and prefix cache: chained hashes, whole-block hits, pinning, LRU eviction."""

from __future__ import annotations

import pytest

from backends.sim.prefix_cache import PrefixCache, block_hashes, hit_blocks_limit


def _hashes(prefix: list[int], n: int, block: int = 4) -> list[int]:
    return block_hashes(prefix + list(range(1000, 1000 + n)), block)


def test_hashes_are_chained_and_only_cover_full_blocks() -> None:
    a = block_hashes(list(range(10)), 4)
    b = block_hashes(list(range(8)) + [99, 98, 97], 4)
    c = block_hashes([0, 1, 2, 3, 9, 9, 9, 9], 4)
    assert len(a) == 2 and a == b  # the trailing partial block has no hash
    assert a[0] == c[0] and a[1] != c[1]
    # same block content after a different prefix is a different hash (chaining)
    assert block_hashes([7, 7, 7, 7, 4, 5, 6, 7], 4)[1] != a[1]


def test_cache_salt_separates_identical_prompts() -> None:
    tokens = list(range(8))
    assert block_hashes(tokens, 4, "tenant-a") != block_hashes(tokens, 4, "tenant-b")
    assert block_hashes(tokens, 4, "tenant-a") == block_hashes(tokens, 4, "tenant-a")


@pytest.mark.parametrize(
    ("num_tokens", "block_size", "expected"),
    [(1029, 128, 8), (1024, 128, 7), (1025, 128, 8), (128, 128, 0), (129, 128, 1), (0, 16, 0)],
)
def test_hit_limit_keeps_the_last_token_to_recompute(num_tokens: int, block_size: int,
                                                     expected: int) -> None:
    assert hit_blocks_limit(num_tokens, block_size) == expected


def test_match_stops_at_first_miss_and_respects_limit() -> None:
    cache = PrefixCache(num_blocks=10, block_size=4)
    hashes = block_hashes(list(range(16)), 4)
    held: list[int | None] = []
    cache.allocate(held, 4)
    for i, h in enumerate(hashes[:2]):
        assert cache.promote(held, i, h)
    assert cache.match(hashes) == 2
    assert cache.match(hashes, max_blocks=1) == 1
    assert cache.match([hashes[2], hashes[0]]) == 0


def test_released_blocks_stay_cached_and_are_evicted_lru_tail_first() -> None:
    cache = PrefixCache(num_blocks=4, block_size=4)
    a = block_hashes(list(range(8)), 4)
    held: list[int | None] = []
    cache.allocate(held, 2)
    cache.promote(held, 0, a[0])
    cache.promote(held, 1, a[1])
    assert cache.usage == 0.5
    cache.release(held)
    assert held == [] and cache.usage == 0.0 and cache.match(a) == 2
    other: list[int | None] = []
    cache.allocate(other, 3)  # 2 free + 1 eviction: the tail block of `a` goes first
    assert cache.counters().evictions == 1
    assert cache.contains(a[0]) and not cache.contains(a[1])
    assert cache.match(a) == 1


def test_pinned_blocks_are_never_evicted() -> None:
    cache = PrefixCache(num_blocks=3, block_size=4)
    a = block_hashes(list(range(8)), 4)
    held: list[int | None] = []
    cache.allocate(held, 2)
    cache.promote(held, 0, a[0])
    cache.promote(held, 1, a[1])
    other: list[int | None] = []
    assert not cache.can_allocate(2)
    cache.allocate(other, 1)
    with pytest.raises(MemoryError):
        cache.allocate(other, 1)
    assert cache.counters().pinned_blocks == 2 and cache.counters().evictions == 0


def test_pin_takes_blocks_off_the_lru_and_counts_references() -> None:
    cache = PrefixCache(num_blocks=4, block_size=4)
    a = block_hashes(list(range(4)), 4)
    held: list[int | None] = []
    cache.allocate(held, 1)
    cache.promote(held, 0, a[0])
    cache.release(held)
    assert cache.can_allocate(4) and not cache.can_allocate(4, pin=a)
    first = cache.pin(a)
    second = cache.pin(a)
    assert cache.usage == 0.25
    cache.release(first)
    assert cache.usage == 0.25  # still referenced by the second request
    cache.release(second)
    assert cache.usage == 0.0 and cache.match(a) == 1


def test_duplicate_block_stays_anonymous() -> None:
    cache = PrefixCache(num_blocks=4, block_size=4)
    h = block_hashes(list(range(4)), 4)[0]
    one: list[int | None] = []
    two: list[int | None] = []
    cache.allocate(one, 1)
    cache.allocate(two, 1)
    assert cache.promote(one, 0, h)
    assert not cache.promote(two, 0, h)
    assert two == [None] and cache.used_blocks == 2


def test_reset_refuses_while_blocks_are_in_use() -> None:
    cache = PrefixCache(num_blocks=4, block_size=4)
    held: list[int | None] = []
    cache.allocate(held, 1)
    assert not cache.reset()
    cache.promote(held, 0, 42)
    cache.release(held)
    assert cache.reset() and not cache.contains(42)


def test_rejects_empty_pool() -> None:
    with pytest.raises(ValueError):
        PrefixCache(0, 16)
