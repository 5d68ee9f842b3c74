"""Properties of the admission queue: it never loses a waiter, and equal weights get equal shares."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.admission.queue import AdmissionQueue, Outcome, QueueFull
from tests.unit.gateway.admission.test_queue import make

KEYS = st.sampled_from(["a", "b", "c"])
OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), KEYS, st.integers(0, 1), st.floats(0.5, 5.0), st.none() | st.floats(0.0, 5.0)),
        st.tuples(st.just("release"), st.integers(1, 3)),
        st.tuples(st.just("cancel"), st.integers(0, 50)),
        st.tuples(st.just("advance"), st.floats(0.0, 2.0)),
    ),
    max_size=60,
)


def _check(queue: AdmissionQueue, tickets: list) -> None:
    waiting = [t for t in tickets if t.outcome is Outcome.WAITING]
    assert queue.depth("c") == len(waiting)
    for key in "abc":
        assert queue.key_depth(key) == sum(1 for t in waiting if t.key == key)
    assert queue.waiting_by_key("c") == {k: n for k in "abc" if (n := sum(1 for t in waiting if t.key == k))}


def _settle_spills(queue: AdmissionQueue, tickets: list, requeued: set[int]) -> None:
    """A ``spill_due`` ticket spills (leaves for good) or, for odd ones, nowhere to spill: back in place, once."""
    for ticket in tickets:
        if ticket.outcome is Outcome.SPILL_DUE and ticket.seq % 2 and ticket.seq not in requeued:
            requeued.add(ticket.seq)
            queue.requeue(ticket)


@settings(max_examples=200, deadline=None)
@given(OPERATIONS)
def test_every_waiter_is_admitted_cancelled_timed_out_evicted_or_spilled(operations: list) -> None:
    queue, fake = make(max_depth=8, max_per_key=5)
    tickets: list = []
    requeued: set[int] = set()
    released = admitted = 0
    for operation in operations:
        if operation[0] == "enqueue":
            _, key, priority, ttl, spill_after = operation
            try:
                tickets.append(queue.enqueue("c", key, ttl_s=ttl, priority=priority, spill_after_s=spill_after))
            except QueueFull:
                pass
        elif operation[0] == "release":
            waiting_before = queue.depth("c")
            got = queue.release("c", operation[1])
            assert len(got) == min(operation[1], waiting_before)  # a slot never goes unused while one waits
            assert all(t.outcome is Outcome.ADMITTED for t in got)
            released += operation[1]
            admitted += len(got)
        elif operation[0] == "cancel" and tickets:
            queue.cancel(tickets[operation[1] % len(tickets)])
        else:
            fake.advance(operation[1])
            _settle_spills(queue, tickets, requeued)
        _check(queue, tickets)
    fake.advance(10.0)  # past every TTL
    _settle_spills(queue, tickets, requeued)
    fake.advance(10.0)
    assert all(t.outcome is not Outcome.WAITING for t in tickets)
    assert sum(1 for t in tickets if t.outcome is Outcome.ADMITTED) == admitted <= released
    _check(queue, tickets)


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 30), st.integers(1, 30), st.integers(1, 60), st.integers(0, 5))
def test_equal_weights_get_equal_shares_while_both_wait(loud: int, quiet: int, slots: int, head_start: int) -> None:
    queue, _ = make(max_depth=10_000)
    for _ in range(head_start):  # the loud key was alone for a while
        queue.enqueue("c", "loud", ttl_s=100)
    queue.release("c", head_start)
    for _ in range(loud * 5):
        queue.enqueue("c", "loud", ttl_s=100)
    for _ in range(quiet):
        queue.enqueue("c", "quiet", ttl_s=100)
    served = [t.key for t in queue.release("c", slots)]
    both = min(slots, 2 * min(loud * 5, quiet))  # while both keys still have waiters
    counts = {key: served[:both].count(key) for key in ("loud", "quiet")}
    assert abs(counts["loud"] - counts["quiet"]) <= 1
