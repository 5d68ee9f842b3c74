"""Prompts in flight: prefill work per endpoint, matches with prompts still being prefilled, expiry."""

from __future__ import annotations

import pytest

from gateway.scheduling.prefill import TTL_S, PrefillTracker, common_blocks

SHARED = tuple(range(1, 41))


@pytest.mark.parametrize(
    ("a", "b", "shared"),
    [
        (SHARED, SHARED, 40),
        (SHARED + (7, 8), SHARED + (9,), 40),
        (SHARED[:10] + (-1,) * 30, SHARED, 10),  # chained hashes: once different, different after
        ((5,), SHARED, 0),
        ((), SHARED, 0),
    ],
)
def test_common_blocks(a: tuple[int, ...], b: tuple[int, ...], shared: int) -> None:
    assert common_blocks(a, b) == shared == common_blocks(b, a)


def test_expect_settle_and_match() -> None:
    tracker = PrefillTracker()
    first = tracker.expect("a", 9_000.0, SHARED, now=0.0)
    tracker.expect("a", 1_000.0, (99, 98), now=0.0)
    assert tracker.pending == {"a": 10_000.0}
    assert tracker.match("a", SHARED[:25] + (0,)) == 25 and tracker.match("b", SHARED) == 0
    tracker.settle(first)
    tracker.settle(first)  # idempotent
    assert tracker.pending == {"a": 1_000.0} and tracker.match("a", SHARED) == 0


def test_unsettled_tickets_expire_and_restarts_forget() -> None:
    tracker = PrefillTracker()
    tracker.expect("a", 500.0, SHARED, now=0.0)
    tracker.expect("b", 700.0, SHARED, now=TTL_S / 2)
    tracker.expect("c", 1.0, (), now=TTL_S + 1)  # a later request sweeps the expired one
    assert tracker.pending == {"b": 700.0, "c": 1.0} and tracker.match("a", SHARED) == 0
    tracker.forget("b")
    assert "b" not in tracker.pending and tracker.match("b", SHARED) == 0


def test_only_the_newest_prompts_sharing_a_first_block_are_searched() -> None:
    tracker = PrefillTracker()
    tracker.expect("a", 1.0, SHARED, now=0.0)  # the long one, then many shorter ones with its head
    for i in range(10):
        tracker.expect("a", 1.0, SHARED[:5] + (-i,), now=0.0)
    assert tracker.match("a", SHARED) == 5  # bounded work: the oldest is not searched any more
