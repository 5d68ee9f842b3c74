"""The in-memory :class:`~gateway.state.base.StateStore`: the single-replica default.

The prefix index is a :class:`~gateway.prefix.index.PrefixIndex` (one bounded LRU per endpoint);
there are no other replicas, so remote in-flight counts are always empty. Every method completes
synchronously; :meth:`MemoryStore.lookup` is a coroutine only to fit the protocol. The Redis store
keeps one of these as its local view (its own writes), used while Redis is unreachable.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.prefix.hashing import PrefixKey
from gateway.prefix.index import DEFAULT_CAPACITY, PrefixIndex
from gateway.state.base import StoreView


class MemoryStore:
    """Prefix index and nothing shared."""

    def __init__(self, default_capacity: int = DEFAULT_CAPACITY) -> None:
        self.index = PrefixIndex(default_capacity)

    def view(self, endpoints: Sequence[str], key: PrefixKey, *, degraded: bool = False) -> StoreView:
        """The lookup, synchronously."""
        matched, affinity = self.index.match_all(endpoints, key.blocks, key.affinity)
        return StoreView(matched, frozenset(affinity), {}, degraded)

    def peek(self, endpoints: Sequence[str], key: PrefixKey) -> StoreView:
        return self.view(endpoints, key)

    async def lookup(self, endpoints: Sequence[str], key: PrefixKey) -> StoreView:
        return self.view(endpoints, key)

    def record(self, endpoint: str, key: PrefixKey) -> None:
        extra = () if key.affinity is None else (key.affinity,)
        self.index.lru(endpoint).insert(key.blocks, extra)

    def set_capacity(self, endpoint: str, blocks: int) -> None:
        self.index.lru(endpoint).resize(blocks)

    def clear(self, endpoint: str) -> None:
        lru = self.index.peek(endpoint)
        if lru is not None:
            lru.clear()

    def size(self, endpoint: str) -> int:
        lru = self.index.peek(endpoint)
        return 0 if lru is None else len(lru)

    async def flush(self) -> None:
        return None

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None
