"""Prefix keys of long prompts: serializing only the hashed head gives the same keys as the whole prompt."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.prefix.hashing import (
    PrefixKey,
    PromptHasher,
    canonical_prompt,
    chain_hashes,
)
from gateway.protocol.openai import InferenceRequest, Operation, parse_request


def reference_key(hasher: PromptHasher, request: InferenceRequest, model: str) -> PrefixKey:
    """The key from the whole canonical prompt, no memo (the definition of the module docstring)."""
    body = request.body
    salt = body.get("cache_salt")
    seed = hasher.seed(model, salt if isinstance(salt, str) else "")
    data = canonical_prompt(request)
    affinity_text = body.get("prompt_cache_key") or body.get("user")
    affinity = None
    if isinstance(affinity_text, str) and affinity_text:
        import xxhash
        affinity = xxhash.xxh3_64_intdigest(b"affinity\x00" + affinity_text.encode(), seed)
    return PrefixKey(chain_hashes(data, hasher.block_bytes, seed, hasher.max_blocks), affinity, len(data), hasher.block_bytes)


TEXT = st.one_of(
    st.text(alphabet="abc xyz.\n", max_size=300),
    st.text(max_size=120),  # any Unicode: the cut falls inside multi-byte characters
    st.integers(0, 2000).map(lambda n: "p" * n),
)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": st.one_of(TEXT, st.none())},
    optional={"name": st.text(max_size=5), "tool_calls": st.lists(st.fixed_dictionaries({"id": st.text(max_size=4)}), max_size=2)},
)


@settings(max_examples=300, deadline=None)
@given(
    messages=st.lists(MESSAGE, min_size=1, max_size=6),
    tools=st.one_of(st.none(), st.lists(st.fixed_dictionaries({"type": st.just("function")}), min_size=1, max_size=2)),
    block=st.sampled_from([16, 32, 64]),
    max_blocks=st.integers(1, 12),
)
def test_bounded_keys_equal_the_whole_prompts_keys(messages: list[dict[str, Any]], tools: Any, block: int, max_blocks: int) -> None:
    body: dict[str, Any] = {"model": "m", "messages": messages}
    if tools:
        body["tools"] = tools
    request = parse_request(Operation.CHAT, orjson.dumps(body))
    for memo in (0, 4096):
        hasher = PromptHasher(block, max_blocks, memo_hashes=memo)
        expected = reference_key(hasher, request, "m")
        assert hasher.key(request, "m") == expected
        assert hasher.key(request, "m") == expected  # again: now through the memo


@settings(max_examples=100, deadline=None)
@given(prompt=TEXT, block=st.sampled_from([16, 64]), max_blocks=st.integers(1, 8))
def test_bounded_completion_keys_equal_the_whole_prompts_keys(prompt: str, block: int, max_blocks: int) -> None:
    request = parse_request(Operation.COMPLETION, orjson.dumps({"model": "m", "prompt": prompt}))
    hasher = PromptHasher(block, max_blocks)
    assert hasher.key(request, "m") == reference_key(hasher, request, "m")


def test_a_30_mib_prompt_is_keyed_by_its_head_and_its_full_length() -> None:
    content = "x" * (30 * 1024 * 1024)
    request = parse_request(Operation.CHAT, orjson.dumps({"model": "m", "messages": [
        {"role": "system", "content": "s"}, {"role": "user", "content": content}, {"role": "user", "content": "q"}]}))
    key = PromptHasher().key(request, "m")
    assert len(key.blocks) == 1024
    assert key.length == len(canonical_prompt(request))
    assert key == reference_key(PromptHasher(), request, "m")
