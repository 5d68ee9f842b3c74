"""Prompts in flight: per endpoint, the prompts sent to it that it has not prefilled yet.

Two things a router knows before any engine metric or commit says so:

- **Prefill work.** A request's time to first token is, to first order, the prefill work queued
  ahead of it on its engine plus its own (vLLM schedules prefills first come, first served within
  a token budget per step; a long cold prompt slows every newcomer behind it). When a decision
  is made the chosen endpoint is **expected** to prefill the prompt's uncached bytes
  (``length - matched * block_bytes``); ``pending[endpoint]`` sums them for the ``prefill``
  scorer (the "potential prefill blocks" of NVIDIA Dynamo's KV router, counted here from the
  gateway's own traffic). Bytes rather than tokens: no conversion needed to compare them with
  the uncached bytes of the request being placed.
- **Blocks about to be cached.** The prefix index is written on ``commit`` (the first token:
  vLLM sends its response headers with it), so without this a second request for the same new
  prefix that arrives while the first is still prefilling sees no match anywhere and may open
  the prefix on a second endpoint (measured offline: 1-2 points of hit rate on the multi-tenant
  testbed, up to 12 on two vLLM-CPU workers, whose prefill takes seconds). :meth:`match` gives
  the longest prefix of a prompt that an in-flight prompt on the endpoint shares: chained hashes
  make equality at block ``i`` imply equality before it, so it is a binary search per in-flight
  prompt. In-flight prompts are grouped by their first block (only prompts that share it can
  share anything), and only the ``RECENT`` newest of a group are searched: prompts that share a
  head (a tenant's system prompt) match the new one about equally, so the cost stays bounded
  however many are in flight.

A ticket is **settled** when the first token arrives (``commit``) or the request ends; tickets
not settled within ``TTL_S`` (a failed attempt, a client that left before its first token)
expire, so nothing leaks. One replica's view (other replicas' traffic is not counted).
Event-loop only.
"""

from __future__ import annotations

from collections.abc import Sequence

TTL_S = 20.0
"""A ticket not settled after this long is dropped."""
RECENT = 4
"""In-flight prompts searched per endpoint and first block (newest first)."""


def common_blocks(a: Sequence[int], b: Sequence[int]) -> int:
    """Leading blocks two chained-hash sequences share (binary search: equal at i => equal before)."""
    n = min(len(a), len(b))
    if n == 0 or a[0] != b[0]:
        return 0
    if a[n - 1] == b[n - 1]:
        return n
    low, high = 1, n - 1  # a[low - 1] == b[low - 1], a[high] != b[high]
    while low < high:
        middle = (low + high) // 2
        if a[middle] == b[middle]:
            low = middle + 1
        else:
            high = middle
    return low


class PrefillTracker:
    """Prompts in flight per endpoint name (see the module docstring)."""

    __slots__ = ("pending", "_tickets", "_prompts", "_last")

    def __init__(self) -> None:
        self.pending: dict[str, float] = {}
        # ticket -> (endpoint, bytes, expiry, (endpoint, first block) or None)
        self._tickets: dict[int, tuple[str, float, float, tuple[str, int] | None]] = {}
        # (endpoint, first block) -> ticket -> prompt blocks, oldest first
        self._prompts: dict[tuple[str, int], dict[int, Sequence[int]]] = {}
        self._last = 0

    def expect(self, name: str, uncached_bytes: float, blocks: Sequence[int], now: float) -> int:
        """``name`` was sent a prompt of ``blocks`` with this much left to prefill; returns the ticket."""
        self._expire(now)
        self._last = ticket = self._last + 1
        group = (name, blocks[0]) if blocks else None
        self._tickets[ticket] = (name, uncached_bytes, now + TTL_S, group)
        self.pending[name] = self.pending.get(name, 0.0) + uncached_bytes
        if group is not None:
            self._prompts.setdefault(group, {})[ticket] = blocks
        return ticket

    def settle(self, ticket: int) -> None:
        """The ticket's first token arrived, or the request ended (idempotent)."""
        entry = self._tickets.pop(ticket, None)
        if entry is not None:
            self._release(ticket, *entry)

    def match(self, name: str, blocks: Sequence[int]) -> int:
        """Leading ``blocks`` shared with a prompt in flight to ``name`` (newest ``RECENT`` searched)."""
        if not blocks:
            return 0
        prompts = self._prompts.get((name, blocks[0]))
        if not prompts:
            return 0
        best = 0
        for searched, ticket in enumerate(reversed(prompts)):
            if searched == RECENT:
                break
            shared = common_blocks(blocks, prompts[ticket])
            if shared > best:
                best = shared
        return best

    def forget(self, name: str) -> None:
        """The endpoint restarted: its prompts in flight no longer count (their tickets expire)."""
        self.pending.pop(name, None)
        for group in [group for group in self._prompts if group[0] == name]:
            del self._prompts[group]

    def _expire(self, now: float) -> None:
        tickets = self._tickets
        while tickets:  # insertion order is expiry order (one TTL for all)
            ticket = next(iter(tickets))
            entry = tickets[ticket]
            if entry[2] > now:
                return
            del tickets[ticket]
            self._release(ticket, *entry)

    def _release(self, ticket: int, name: str, amount: float, expiry: float, group: tuple[str, int] | None) -> None:
        left = self.pending.get(name, 0.0) - amount
        if left > 0.5:
            self.pending[name] = left
        else:
            self.pending.pop(name, None)
        prompts = self._prompts.get(group) if group is not None else None
        if prompts is not None:
            prompts.pop(ticket, None)
            if not prompts:
                del self._prompts[group]  # type: ignore[arg-type]
