"""The native BlockLRU (gateway/prefix/_lru.c) against the pure-Python reference (PyBlockLRU).

Random operation replays, by hypothesis and by a long seeded run at sizes that make the native
table grow and wrap, compare every answer and the whole state (``items()``, least recent first).
"""

from __future__ import annotations

import gc
import os
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.prefix import hashing
from gateway.prefix import index as index_module
from gateway.prefix.index import PyBlockLRU

Native = index_module._NativeBlockLRU
pytestmark = pytest.mark.skipif(Native is None, reason="gateway.prefix._lru is not built (no C compiler at install)")

_BIG = [2**64 - 1, 2**63, 2**63 - 1, 2**32, 0]
keys = st.one_of(st.integers(0, 40), st.sampled_from(_BIG))
chains = st.lists(keys, max_size=12)
stamps = st.one_of(st.none(), st.integers(-5, 60))
operations = st.lists(
    st.one_of(
        st.tuples(st.just("insert"), chains, chains),
        st.tuples(st.just("touch"), chains, chains, stamps),
        st.tuples(st.just("load"), st.lists(st.tuples(keys, st.integers(0, 60)), max_size=8)),
        st.tuples(st.just("expire"), st.integers(-5, 70)),
        st.tuples(st.just("trim"), chains, st.integers(-2, 12)),
        st.tuples(st.just("resize"), st.integers(-1, 30)),
        st.tuples(st.just("match"), chains),
        st.tuples(st.just("contains"), keys),
        st.tuples(st.just("clear")),
    ),
    max_size=60,
)


def apply(lru: object, op: tuple) -> object:
    name, *args = op
    if name == "contains":
        return args[0] in lru
    if name == "touch":
        return lru.touch(args[0], args[1], args[2])
    if name == "load":
        return lru.load(iter(args[0]))  # any iterable: the Redis snapshot is a generator
    return getattr(lru, name)(*args)


@settings(max_examples=400, deadline=None)
@given(capacity=st.integers(1, 25), ops=operations)
def test_random_operations_give_the_same_answers_and_state(capacity: int, ops: list[tuple]) -> None:
    native, reference = Native(capacity), PyBlockLRU(capacity)
    for op in ops:
        assert apply(native, op) == apply(reference, op), op
        assert len(native) == len(reference) and native.capacity == reference.capacity
        assert native.items() == reference.items(), op


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_long_replay_at_growing_sizes_matches(seed: int) -> None:
    """Past the first allocation (64 nodes) and through several table doublings, wrapping the
    probe sequences, with evictions from a full index on every insert for most of the run."""
    rng = random.Random(seed)
    capacity = rng.choice([100, 1_000, 5_000])
    native, reference = Native(capacity), PyBlockLRU(capacity)
    pool = [rng.getrandbits(64) for _ in range(capacity * 3)] + list(range(200))
    for step in range(6_000):
        roll = rng.random()
        chain = [rng.choice(pool) for _ in range(rng.randint(0, 40))]
        if roll < 0.55:
            extra = (rng.choice(pool),)
            native.insert(chain, extra)
            reference.insert(chain, extra)
        elif roll < 0.75:
            stamp = step
            native.touch(chain, (), stamp)
            reference.touch(chain, (), stamp)
        elif roll < 0.85:
            keep = rng.randint(0, len(chain))
            assert native.trim(chain, keep) == reference.trim(chain, keep)
        elif roll < 0.9:
            before = step - rng.randint(0, 500)
            assert native.expire(before) == reference.expire(before)
        elif roll < 0.92:
            new = rng.randint(1, capacity * 2)
            native.resize(new)
            reference.resize(new)
        else:
            assert native.match(chain) == reference.match(chain)
        for key in chain[:3]:
            assert (key in native) == (key in reference)
        if step % 500 == 0:
            assert native.items() == reference.items()
    assert native.items() == reference.items() and len(native) == len(reference)


def test_keys_outside_uint64_are_refused_on_writes_and_absent_on_reads() -> None:
    lru = Native(8)
    lru.insert([1, 2])
    for bad, error in ((-1, OverflowError), (2**64, OverflowError), ("a", TypeError), (1.0, TypeError), (None, TypeError)):
        with pytest.raises(error):
            lru.insert([bad])
        with pytest.raises(error):
            lru.touch((), (bad,), 5)
        with pytest.raises(error):
            lru.load([(bad, 5)])
        assert bad not in lru
        assert lru.match([1, bad]) == 1 and lru.match([bad, 1]) == 0
        assert lru.trim([bad], 0) == 0
    with pytest.raises(TypeError):
        lru.touch([3], (), "soon")
    with pytest.raises(TypeError):
        lru.match(5)
    with pytest.raises(ValueError, match="capacity must be >= 1"):
        Native(0)
    assert lru.items() == [(2, None), (1, None)]  # the refused writes changed nothing


@pytest.mark.parametrize("at", [0, 5, 11, 19])
def test_a_bad_key_in_a_long_chain_raises_at_its_turn(at: int) -> None:
    """Keys are converted ahead of their touch (to prefetch their slots): a bad one still raises
    only when reached, tail first, so the keys after it are in and the ones before it are not."""
    chain: list[object] = list(range(100, 120))
    chain[at] = "bad"
    lru = Native(64)
    with pytest.raises(TypeError):
        lru.insert(chain)
    assert [key for key, _ in lru.items()] == list(range(119, 100 + at, -1))


def test_memory_is_bounded_by_capacity_and_freed_by_clear() -> None:
    lru = Native(10_000)
    rng = random.Random(7)
    for _ in range(50):
        lru.insert([rng.getrandbits(64) for _ in range(1_000)])
    assert len(lru) == 10_000
    held = lru.nbytes
    assert held <= (10_000 + 2_048) * 24 + 32_768 * 8  # nodes: capacity + one call's slack; table: a power of 2
    for _ in range(20):
        lru.insert([rng.getrandbits(64) for _ in range(1_000)])
    assert lru.nbytes == held  # full: nodes recycled, no table rebuild
    lru.clear()
    assert len(lru) == 0 and lru.nbytes == 0 and lru.match([1]) == 0
    lru.insert([5])
    assert lru.items() == [(5, None)]
    assert not gc.is_tracked(lru)


@pytest.mark.parametrize(
    ("switch", "code", "native", "python"),
    [
        ("KVGATE_NATIVE_LRU", "from gateway.prefix import index; print(index.NATIVE, index.BlockLRU.__module__)",
         ["True", "gateway.prefix._lru"], ["False", "gateway.prefix.index"]),
        ("KVGATE_NATIVE_CHAIN", "from gateway.prefix import hashing; print(hashing.NATIVE_CHAIN, hashing.chain_hashes.__name__)",
         ["True", "chain_hashes"], ["False", "py_chain_hashes"]),
    ],
    ids=["lru", "chain"],
)
def test_the_environment_switches_select_the_python_ones(switch: str, code: str, native: list[str], python: list[str]) -> None:
    if switch == "KVGATE_NATIVE_CHAIN" and hashing._native_chain_hashes is None:
        pytest.skip("gateway.prefix._chain is not built (no C compiler at install)")
    default = {name: value for name, value in os.environ.items() if not name.startswith("KVGATE_NATIVE_")}
    on = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=default)
    off = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={switch: "0", "PATH": ""})
    assert on.stdout.split() == native
    assert off.stdout.split() == python
