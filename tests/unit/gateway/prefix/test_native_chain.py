"""The native block chain (gateway/prefix/_chain.c) against the pure-Python reference (py_chain_hashes).

Random data, block sizes, seeds across the whole 64-bit range, block caps and start offsets give
the same hashes; a prefix key built with either is the same (the memo's resumed chains included);
bad arguments raise as documented (the ``KVGATE_NATIVE_CHAIN`` switch: test_native_lru.py).
"""

from __future__ import annotations

import random

import orjson
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.prefix import hashing
from gateway.prefix.hashing import PromptHasher, py_chain_hashes
from gateway.protocol.openai import Operation, parse_request

native = hashing._native_chain_hashes
pytestmark = pytest.mark.skipif(native is None, reason="gateway.prefix._chain is not built (no C compiler at install)")

seeds = st.one_of(st.integers(0, 2**64 - 1), st.sampled_from([0, 1, 2**63, 2**64 - 1]))


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=3000), st.sampled_from([1, 16, 63, 64, 256, 257, 4096]), seeds, st.integers(0, 40), st.integers(0, 45))
def test_the_same_hashes_as_the_reference(data: bytes, block_bytes: int, seed: int, max_blocks: int, start: int) -> None:
    assert native(data, block_bytes, seed, max_blocks, start) == py_chain_hashes(data, block_bytes, seed, max_blocks, start)


def test_a_long_prompt_and_the_definition() -> None:
    data = random.Random(7).randbytes(300_000)
    seed = 2**64 - 12345
    chain = native(data, 256, seed, 1024)
    assert len(chain) == 1024 and chain == py_chain_hashes(data, 256, seed, 1024)
    assert chain[0] == xxhash.xxh3_64_intdigest(data[:256], seed)
    assert chain[1] == xxhash.xxh3_64_intdigest(data[256:512], chain[0])
    assert native(data, 256, chain[9], 1024, 10) == chain[10:]  # resumed from a known head
    assert native(memoryview(data), 256, seed, 4) == chain[:4] == native(bytearray(data[:1100]), 256, seed, 9)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("text", 256, 0, 4), TypeError),
        ((b"x" * 512, 256, -1, 4), OverflowError),
        ((b"x" * 512, 256, 2**64, 4), OverflowError),
        ((b"x" * 512, 256, 1.5, 4), TypeError),
        ((b"x" * 512, 0, 0, 4), ValueError),
        ((b"x" * 512, 256, 0, -1), ValueError),
        ((b"x" * 512, 256, 0, 4, -1), ValueError),
    ],
)
def test_bad_arguments_raise(args: tuple, error: type[Exception]) -> None:
    with pytest.raises(error):
        native(*args)


def _chat(rng: random.Random, system: str) -> dict:
    turns = [{"role": "system", "content": system}]
    for i in range(rng.randrange(1, 6)):
        turns.append({"role": "user" if i % 2 == 0 else "assistant", "content": rng.randbytes(rng.randrange(0, 900)).hex()})
    return {"model": "m", "messages": turns}


def test_prefix_keys_are_the_same_with_either_chain(monkeypatch: pytest.MonkeyPatch) -> None:
    """Conversations that share system prompts and grow turn by turn, so the memo resumes chains."""
    rng = random.Random(3)
    systems = [rng.randbytes(n).hex() for n in (10, 700, 3000)]
    bodies = []
    for _ in range(60):
        body = _chat(rng, rng.choice(systems))
        bodies.append(body)
        bodies.append({**body, "messages": [*body["messages"], {"role": "user", "content": "and then?"}]})
    requests = [parse_request(Operation.CHAT, orjson.dumps(body)) for body in bodies]
    with_native = PromptHasher(block_bytes=64, max_blocks=200)
    keys_native = [with_native.key(request, "m") for request in requests]
    monkeypatch.setattr(hashing, "chain_hashes", py_chain_hashes)
    with_python = PromptHasher(block_bytes=64, max_blocks=200)
    assert [with_python.key(request, "m") for request in requests] == keys_native
    assert sum(len(key.blocks) for key in keys_native) > 1000
