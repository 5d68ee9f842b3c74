"""Continuous batching with chunked prefill, after vLLM v1's scheduler (pure, no clock).

Each call to :meth:`Scheduler.schedule` plans one engine step under a token budget
(``max_num_batched_tokens``) and a sequence limit (``max_num_seqs``), as vLLM v1 does
(``v1/core/sched/scheduler.py``):

1. **Running** requests first, in admission order. Each gets the tokens it still has to compute
   (1 for a decoding sequence, the rest of its prompt for one still in prefill), capped by the
   remaining budget: a long prompt is prefilled in chunks over several steps. If its new KV blocks
   do not fit, the most recently admitted running request is **preempted** (recompute mode: its
   blocks are released, it goes back to the head of the waiting queue) until they fit.
2. **Waiting** requests next (FCFS), only if nothing was preempted in this step, while budget and
   sequence slots remain. On admission the prefix cache is looked up once; the hit blocks are
   pinned and the request starts computing after them, and the lookup is recorded in the prefix
   cache counters (queries += prompt tokens, hits += hit tokens), as vLLM records it at admission.

:meth:`Scheduler.complete` applies a planned step: computed tokens advance, full prompt blocks
become cached, and each request whose tokens are all computed samples one new token. A request
finishes when it has ``max_output_tokens`` tokens; its blocks are released (cached ones become
evictable). Timing lives elsewhere (``latency.py``, ``engine.py``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from backends.sim.latency import attention_pairs
from backends.sim.prefix_cache import HeldBlocks, PrefixCache, hit_blocks_limit


@dataclass(eq=False)
class SimRequest:
    """One request's scheduling state (identity equality: two requests are never equal)."""

    request_id: str
    prompt_len: int
    block_hashes: Sequence[int]
    max_output_tokens: int
    num_computed: int = 0
    num_output: int = 0
    cached_tokens: int = 0
    created_blocks: int = 0
    num_preemptions: int = 0
    looked_up: bool = False
    finished: bool = False
    blocks_checked: int = 0
    held: HeldBlocks = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        """Prompt plus generated tokens (what must be computed before the next sample)."""
        return self.prompt_len + self.num_output

    @property
    def in_prefill(self) -> bool:
        """True while prompt (or recomputed) tokens remain beyond a single decode token."""
        return self.num_tokens - self.num_computed > 1 or self.num_computed < self.prompt_len


@dataclass(frozen=True)
class ScheduledItem:
    """``tokens`` tokens of ``request`` computed in one step; ``prefill`` unless a decode."""

    request: SimRequest
    tokens: int
    prefill: bool


@dataclass(frozen=True)
class StepPlan:
    """What one engine step computes."""

    items: tuple[ScheduledItem, ...]
    preempted: tuple[SimRequest, ...] = ()

    @property
    def prefill_tokens(self) -> int:
        return sum(i.tokens for i in self.items if i.prefill)

    @property
    def decode_seqs(self) -> int:
        return sum(1 for i in self.items if not i.prefill)

    @property
    def attention_pairs(self) -> float:
        """Attention pairs of the step (read before :meth:`Scheduler.complete` applies it)."""
        return sum(attention_pairs(i.tokens, i.request.num_computed) for i in self.items)


@dataclass
class PrefixCacheStats:
    """vLLM's prefix-cache counters, in tokens, for requests admitted without preemption."""

    queries: int = 0
    hits: int = 0
    preemptions: int = 0


@dataclass(frozen=True)
class StepResult:
    """Requests that sampled a token in a completed step, and those that finished."""

    sampled: tuple[SimRequest, ...]
    finished: tuple[SimRequest, ...]


class Scheduler:
    """Plans and applies engine steps over one :class:`PrefixCache` (see module docstring)."""

    def __init__(self, cache: PrefixCache, max_num_seqs: int, max_num_batched_tokens: int) -> None:
        self.cache = cache
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: deque[SimRequest] = deque()
        self.running: list[SimRequest] = []
        self.stats = PrefixCacheStats()

    def blocks_needed(self, request: SimRequest, new_tokens: int) -> int:
        """New blocks ``request`` must hold to compute ``new_tokens`` more tokens."""
        size = self.cache.block_size
        total = -(-(request.num_computed + new_tokens) // size)
        return max(total - len(request.held), 0)

    def fits(self, prompt_len: int, max_output_tokens: int) -> bool:
        """True if one request of this size can ever hold all its blocks."""
        size = self.cache.block_size
        return -(-(prompt_len + max_output_tokens) // size) <= self.cache.num_blocks

    def add(self, request: SimRequest) -> None:
        """Queue a new request (FCFS)."""
        self.waiting.append(request)

    def abort(self, request: SimRequest) -> None:
        """Drop a request wherever it is and release its blocks."""
        if request.finished:
            return
        request.finished = True
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self.cache.release(request.held)

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def schedule(self) -> StepPlan:
        """Plan the next step (running first, then admissions); mutates block ownership."""
        budget = self.max_num_batched_tokens
        items: list[ScheduledItem] = []
        preempted: list[SimRequest] = []
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            tokens = min(request.num_tokens - request.num_computed, budget)
            if not self._reserve(request, tokens, preempted):
                break
            items.append(ScheduledItem(request, tokens, request.in_prefill))
            budget -= tokens
            index += 1
        if not preempted:
            budget = self._admit(budget, items)
        return StepPlan(tuple(items), tuple(preempted))

    def _reserve(self, request: SimRequest, tokens: int, preempted: list[SimRequest]) -> bool:
        """Allocate blocks for ``tokens`` more, preempting from the tail; False if self-preempted."""
        needed = self.blocks_needed(request, tokens)
        while not self.cache.can_allocate(needed):
            victim = self.running.pop()
            self._preempt(victim)
            preempted.append(victim)
            if victim is request:
                return False
        self.cache.allocate(request.held, needed)
        return True

    def _preempt(self, request: SimRequest) -> None:
        self.cache.release(request.held)
        request.num_computed = 0
        request.blocks_checked = 0
        request.num_preemptions += 1
        self.stats.preemptions += 1
        self.waiting.appendleft(request)

    def _admit(self, budget: int, items: list[ScheduledItem]) -> int:
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            limit = hit_blocks_limit(request.num_tokens, self.cache.block_size)
            hits = list(request.block_hashes[: self.cache.match(request.block_hashes, limit)])
            hit_tokens = len(hits) * self.cache.block_size
            tokens = min(request.num_tokens - hit_tokens, budget)
            size = self.cache.block_size
            needed = -(-(hit_tokens + tokens) // size) - len(hits)
            if not self.cache.can_allocate(needed, pin=hits):
                break
            self.waiting.popleft()
            request.held = self.cache.pin(hits)
            self.cache.allocate(request.held, needed)
            request.num_computed = hit_tokens
            if not request.looked_up:
                request.looked_up = True
                request.cached_tokens = hit_tokens
                self.stats.queries += request.num_tokens
                self.stats.hits += hit_tokens
            self.running.append(request)
            items.append(ScheduledItem(request, tokens, True))
            budget -= tokens
        return budget

    def complete(self, plan: StepPlan) -> StepResult:
        """Apply a planned step: advance, cache full prompt blocks, sample, finish."""
        sampled: list[SimRequest] = []
        finished: list[SimRequest] = []
        for item in plan.items:
            request = item.request
            if request.finished:
                continue
            request.num_computed += item.tokens
            self._cache_full_blocks(request)
            if request.num_computed < request.num_tokens:
                continue
            request.num_output += 1
            sampled.append(request)
            if request.num_output >= request.max_output_tokens:
                request.finished = True
                self.running.remove(request)
                self.cache.release(request.held)
                finished.append(request)
        return StepResult(tuple(sampled), tuple(finished))

    def _cache_full_blocks(self, request: SimRequest) -> None:
        full = min(request.num_computed // self.cache.block_size, len(request.block_hashes))
        for index in range(request.blocks_checked, full):
            if request.held[index] is None and self.cache.promote(
                request.held, index, request.block_hashes[index]
            ):
                request.created_blocks += 1
        request.blocks_checked = max(request.blocks_checked, full)
