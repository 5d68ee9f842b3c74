"""Prefix hashing: canonical serialization, chained blocks, seeds and affinity keys (table-driven)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.prefix.hashing import PromptHasher, canonical_prompt, chain_hashes
from gateway.protocol.openai import InferenceRequest, Operation, parse_request

LONG = "The same long system prompt, shared by every request of a tenant. " * 40


def chat(*messages: dict[str, Any], **fields: Any) -> InferenceRequest:
    body = {"model": "m", "messages": list(messages), **fields}
    return parse_request(Operation.CHAT, orjson.dumps(body))


def completion(prompt: Any, **fields: Any) -> InferenceRequest:
    return parse_request(Operation.COMPLETION, orjson.dumps({"model": "m", "prompt": prompt, **fields}))


HASHER = PromptHasher(block_bytes=64)


def shared_blocks(a: InferenceRequest, b: InferenceRequest, model_b: str = "m") -> int:
    x, y = HASHER.key(a, "m").blocks, HASHER.key(b, model_b).blocks
    count = 0
    while count < min(len(x), len(y)) and x[count] == y[count]:
        count += 1
    return count


SYSTEM = {"role": "system", "content": LONG}

CASES = [
    # (name, a, b, expectation on shared leading blocks)
    ("same prompt", chat(SYSTEM, {"role": "user", "content": "hi"}), chat(SYSTEM, {"role": "user", "content": "hi"}), "all"),
    ("same system, other question", chat(SYSTEM, {"role": "user", "content": "a?"}), chat(SYSTEM, {"role": "user", "content": "b?"}), "most"),
    ("sampling fields ignored", chat(SYSTEM, temperature=0.1, max_tokens=3), chat(SYSTEM, temperature=0.9, stream=True), "all"),
    ("other system prompt", chat(SYSTEM), chat({"role": "system", "content": "X" + LONG}), "none"),
    ("role matters", chat(SYSTEM), chat({"role": "user", "content": LONG}), "none"),
    ("cache_salt separates", chat(SYSTEM), chat(SYSTEM, cache_salt="tenant-2"), "none"),
    ("tools come first", chat(SYSTEM, tools=[{"type": "function", "function": {"name": "f"}}]), chat(SYSTEM), "none"),
    ("text parts equal a string", chat({"role": "system", "content": [{"type": "text", "text": LONG}]}), chat(SYSTEM), "all"),
    ("completion prefix", completion(LONG + "one"), completion(LONG + "two"), "most"),
]


@pytest.mark.parametrize(("a", "b", "expect"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_shared_prefix_blocks(a: InferenceRequest, b: InferenceRequest, expect: str) -> None:
    shared = shared_blocks(a, b)
    total = min(len(HASHER.key(a, "m").blocks), len(HASHER.key(b, "m").blocks))
    assert total > 5
    if expect == "all":
        assert shared == total
    elif expect == "most":
        assert total - 2 <= shared <= total
    else:
        assert shared == 0


def test_model_seeds_the_chain() -> None:
    request = chat(SYSTEM)
    assert shared_blocks(request, request, model_b="other") == 0


def test_only_full_blocks_are_hashed_and_max_blocks_bounds_them() -> None:
    assert chain_hashes(b"x" * 63, 64, 0, 100) == ()
    assert len(chain_hashes(b"x" * 200, 64, 0, 100)) == 3
    assert len(chain_hashes(b"x" * 10_000, 64, 0, 5)) == 5
    blocks = chain_hashes(b"x" * 256, 64, 0, 100)
    assert len(set(blocks)) == 4  # chained: equal blocks hash differently by position


def test_token_prompts_hash_as_packed_ids() -> None:
    tokens = list(range(1000))
    assert canonical_prompt(completion(tokens)) == b"".join(t.to_bytes(4, "little") for t in tokens)
    assert shared_blocks(completion(tokens + [1]), completion(tokens + [2])) == 1000 * 4 // 64


@pytest.mark.parametrize(
    ("fields_a", "fields_b", "same"),
    [
        ({"prompt_cache_key": "k1"}, {"prompt_cache_key": "k1"}, True),
        ({"prompt_cache_key": "k1"}, {"prompt_cache_key": "k2"}, False),
        ({"user": "u1"}, {"user": "u1"}, True),
        ({"prompt_cache_key": "k1", "user": "u1"}, {"prompt_cache_key": "k1", "user": "u2"}, True),
        ({}, {}, None),
    ],
)
def test_affinity_keys(fields_a: dict[str, str], fields_b: dict[str, str], same: bool | None) -> None:
    a = HASHER.key(chat({"role": "user", "content": "x"}, **fields_a), "m").affinity
    b = HASHER.key(chat({"role": "user", "content": "y"}, **fields_b), "m").affinity
    if same is None:
        assert a is None and b is None
    else:
        assert (a == b) is same and a is not None


def test_key_reports_length_and_block_size() -> None:
    key = HASHER.key(completion("a" * 130), "m")
    assert (key.length, key.block_bytes, len(key.blocks)) == (130, 64, 2)
    with pytest.raises(ValueError):
        PromptHasher(block_bytes=8)


def test_chain_memo_never_changes_the_hashes() -> None:
    memo, plain = PromptHasher(block_bytes=64), PromptHasher(block_bytes=64, memo_hashes=0)
    turns: list[dict[str, Any]] = [SYSTEM]
    requests = []
    for turn in range(6):  # a growing conversation: each request extends the previous one
        turns.append({"role": "user", "content": f"question {turn} " * (turn + 3)})
        requests.append(chat(*turns))
        turns.append({"role": "assistant", "content": f"answer {turn} " * 9})
    requests += [chat(SYSTEM, {"role": "user", "content": q}) for q in ("a?", "b?", "a?")]  # a tenant
    requests.append(chat(SYSTEM, {"role": "user", "content": "c?"}, tools=[{"type": "function"}]))
    requests.append(chat(SYSTEM, {"role": "user", "content": "d?"}, cache_salt="other"))
    for request in requests * 2:
        for model in ("m", "other-model"):
            assert memo.key(request, model) == plain.key(request, model)


def test_chain_memo_is_bounded_by_the_hashes_it_holds() -> None:
    from gateway.prefix.hashing import ChainMemo

    memo = ChainMemo(max_hashes=10)
    for key in range(5):
        memo.put(key, (1, 2, 3, 4))
        memo.get(0)  # used all along: stays
    assert len(memo) == 2 and memo.get(0) == (1, 2, 3, 4) and memo.get(4) == (1, 2, 3, 4)
    assert memo.get(3) is None
