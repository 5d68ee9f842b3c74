"""The :class:`StateStore` protocol: where the prefix index and cluster-wide in-flight counts live.

One store per gateway process. ``memory`` (``state/memory.py``) keeps everything in this process:
the single-replica default. ``redis`` (``state/redis.py``) shares the index and every replica's
in-flight counts, so replicas route the same prefix to the same endpoint and see each other's
load. Both pass ``tests/contract/test_state_store.py``.

Reads (:meth:`StateStore.lookup`) are awaited on the request path, bounded by a deadline inside
the store (:meth:`StateStore.peek` answers without awaiting when no I/O is needed); writes (:meth:`record`, :meth:`set_capacity`, :meth:`clear`) return at once and reach
shared state in the background (:meth:`flush` waits for them). A store that cannot reach its
backend answers from its local view with ``degraded=True``; it never raises to the caller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gateway.prefix.hashing import PrefixKey


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class StoreView:
    """What the store knows about one prompt on a set of endpoints.

    Attributes:
        matched: endpoint name -> leading blocks of the prompt it holds.
        affinity: endpoints that recently served the prompt's affinity key.
        remote_in_flight: endpoint name -> requests in flight from *other* gateway replicas.
        degraded: answered from the local view because the shared backend failed.
    """

    matched: Mapping[str, int]
    affinity: frozenset[str] = frozenset()
    remote_in_flight: Mapping[str, int] = field(default_factory=dict)
    degraded: bool = False


class StateStore(Protocol):
    """Prefix index plus in-flight counts (see the module docstring)."""

    async def lookup(self, endpoints: Sequence[str], key: PrefixKey) -> StoreView:
        """Prefix matches, affinity and other replicas' in-flight counts for ``endpoints``."""

    def peek(self, endpoints: Sequence[str], key: PrefixKey) -> StoreView | None:
        """What :meth:`lookup` would answer, when that needs no I/O (memory store; Redis while it is
        bypassed); None when it does. The request path tries this first."""

    def record(self, endpoint: str, key: PrefixKey) -> None:
        """``endpoint`` accepted a request with this prompt: its blocks are (about to be) cached there."""

    def set_capacity(self, endpoint: str, blocks: int) -> None:
        """Bound the endpoint's index to ``blocks`` entries (evicting least recent ones)."""

    def clear(self, endpoint: str) -> None:
        """Forget everything about ``endpoint``'s cache (it restarted)."""

    def size(self, endpoint: str) -> int:
        """Entries in the endpoint's local index (for tests and explain)."""

    async def flush(self) -> None:
        """Wait until every earlier write has reached the backend (or was dropped on failure)."""

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


def raise_if_cancelling(task: asyncio.Task[Any] | None) -> None:
    """Re-raise a cancellation of ``task`` that a Redis call swallowed (redis-py 7.4 can, mid-command).

    Background loops call it after each store call, so a stop never waits forever on their next
    ``await``.
    """
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
