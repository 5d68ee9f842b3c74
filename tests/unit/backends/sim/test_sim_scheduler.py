"""Continuous batching: chunked prefill, token budget, sequence limit, prefix hits, preemption."""

from __future__ import annotations

from backends.sim.prefix_cache import PrefixCache, block_hashes
from backends.sim.scheduler import Scheduler, SimRequest, StepPlan


def _request(rid: str, tokens: list[int], out: int, block: int = 4) -> SimRequest:
    return SimRequest(rid, len(tokens), block_hashes(tokens, block), out)


def _scheduler(blocks: int = 64, seqs: int = 8, budget: int = 4, block: int = 4) -> Scheduler:
    return Scheduler(PrefixCache(blocks, block), max_num_seqs=seqs, max_num_batched_tokens=budget)


def _shape(plan: StepPlan) -> list[tuple[str, int, bool]]:
    return [(i.request.request_id, i.tokens, i.prefill) for i in plan.items]


def test_long_prompt_is_prefilled_in_chunks_then_decoded() -> None:
    s = _scheduler(budget=4)
    r = _request("a", list(range(10)), out=3)
    s.add(r)
    shapes = []
    while s.has_work:
        plan = s.schedule()
        shapes.append(_shape(plan))
        s.complete(plan)
    assert shapes == [
        [("a", 4, True)], [("a", 4, True)], [("a", 2, True)],  # first token after the 3rd step
        [("a", 1, False)], [("a", 1, False)],
    ]
    assert r.finished and r.num_output == 3 and s.cache.used_blocks == 0


def test_running_decodes_take_the_budget_before_new_prefills() -> None:
    s = _scheduler(budget=4)
    a = _request("a", [1, 2, 3], out=5)
    s.add(a)
    s.complete(s.schedule())  # a: prefill done, 1 token out
    s.add(_request("b", list(range(100, 110)), out=2))
    assert _shape(s.schedule()) == [("a", 1, False), ("b", 3, True)]


def test_sequence_limit_keeps_requests_waiting() -> None:
    s = _scheduler(seqs=2, budget=100)
    for rid in "abc":
        s.add(_request(rid, [ord(rid)] * 3, out=2))
    plan = s.schedule()
    assert [i.request.request_id for i in plan.items] == ["a", "b"]
    assert len(s.waiting) == 1 and len(s.running) == 2


def test_prefix_hit_counts_whole_blocks_and_is_recorded_once() -> None:
    s = _scheduler(budget=100)
    prompt = list(range(10))  # 2 full blocks of 4 + 2 tokens
    first = _request("a", prompt, out=1)
    s.add(first)
    s.complete(s.schedule())
    assert first.cached_tokens == 0 and first.created_blocks == 2
    second = _request("b", prompt + [77], out=1)
    s.add(second)
    plan = s.schedule()
    assert second.cached_tokens == 8 and _shape(plan) == [("b", 3, True)]
    assert (s.stats.queries, s.stats.hits) == (10 + 11, 8)
    assert second.created_blocks == 0


def test_full_hit_still_recomputes_the_last_token() -> None:
    s = _scheduler(budget=100)
    prompt = list(range(8))  # exactly 2 blocks
    s.add(_request("a", prompt, out=1))
    s.complete(s.schedule())
    again = _request("b", prompt, out=1)
    s.add(again)
    plan = s.schedule()
    assert again.cached_tokens == 4 and _shape(plan) == [("b", 4, True)]


def test_preemption_releases_the_newest_request_and_requeues_it_first() -> None:
    s = _scheduler(blocks=3, budget=100, block=4)
    a = _request("a", [1, 2, 3], out=6)
    b = _request("b", [4, 5, 6], out=6)
    s.add(a)
    s.add(b)
    s.complete(s.schedule())  # each holds 1 block; 1 free
    s.complete(s.schedule())  # a grows to 2 blocks (4 tokens computed): pool full
    plan = s.schedule()  # b needs a 2nd block: nothing free, b (newest) is preempted
    assert [r.request_id for r in plan.preempted] == ["b"]
    assert s.waiting[0] is b and b.num_computed == 0 and b.num_preemptions == 1
    assert s.stats.preemptions == 1
    while s.has_work:
        s.complete(s.schedule())
    assert a.num_output == 6 and b.num_output == 6 and s.cache.used_blocks == 0
    assert s.stats.queries == 6  # the resumed lookup is not counted again


def test_abort_releases_blocks_wherever_the_request_is() -> None:
    s = _scheduler(seqs=1, budget=100)
    running = _request("a", [1, 2, 3, 4, 5], out=10)
    waiting = _request("b", [6, 7], out=10)
    s.add(running)
    s.add(waiting)
    s.complete(s.schedule())
    s.abort(running)
    s.abort(waiting)
    s.abort(waiting)
    assert not s.has_work and s.cache.used_blocks == 0


def test_fits_checks_the_whole_pool() -> None:
    s = _scheduler(blocks=4, block=4)
    assert s.fits(10, 6) and not s.fits(10, 7)
