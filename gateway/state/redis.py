"""The Redis :class:`~gateway.state.base.StateStore`: prefix index and in-flight counts shared by replicas.

Request path (``[state] mode = "direct"``): **one round trip**. :meth:`RedisStore.lookup` runs one Lua script
(``state/redis_scripts.py``) that publishes this replica's in-flight counts, reads the other live
replicas' counts and binary-searches each endpoint's index for the prompt's leading blocks.

Writes (``record``, ``set_capacity``, ``clear``) are queued and sent by a background flusher,
many operations per script call; a heartbeat republishes the in-flight counts every
``heartbeat_s`` so an idle replica's figures stay current. Every key has a TTL
(``index_ttl_s``, ``in_flight_ttl_s``): a replica that crashes leaks nothing.

Every write batch is also appended to a change stream (``Pchanges``), so replicas running the
mirror (``[state] mode = "mirror"``, ``state/redis_mirror.py``, a subclass of this store) see the
writes of replicas in either mode.

Degradation: every call is bounded by ``deadline_ms`` (writes by ten times that). A call that
fails or times out makes the store answer from its **local view** (a
:class:`~gateway.state.memory.MemoryStore` holding this replica's own writes) with
``degraded=True`` and skip Redis for ``retry_after_s``; ``kvgate_state_degraded`` is 1 meanwhile and
``kvgate_state_fallbacks_total`` counts the failures. Requests keep flowing either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence

from redis.asyncio import Redis
from redis.backoff import NoBackoff
from redis.exceptions import RedisError
from redis.retry import Retry

from gateway.prefix.hashing import PrefixKey
from gateway.config import StateSettings
from gateway.observability.metrics import RoutingMetrics
from gateway.state.base import StoreView, raise_if_cancelling
from gateway.state.memory import MemoryStore
from gateway.state.redis_scripts import LOOKUP, WRITE

log = logging.getLogger("kvgate.state")

_BATCH = 256
_EMPTY = PrefixKey((), None, 0, 1)
_Op = tuple[str, str, int, bytes, bytes, int]


def _pack(blocks: Sequence[int]) -> bytes:
    return struct.pack(f">{len(blocks)}Q", *blocks)


def _affinity(key: PrefixKey) -> bytes:
    return b"" if key.affinity is None else struct.pack(">Q", key.affinity)


class RedisStore:
    """See the module docstring. Build with :meth:`from_settings` or inject a client in tests."""

    def __init__(
        self,
        settings: StateSettings,
        *,
        client: Redis,
        local_in_flight: Callable[[], Mapping[str, int]],
        metrics: RoutingMetrics,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        replica_id: str | None = None,
        default_capacity: int = 16_384,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.local = MemoryStore(default_capacity)
        self.replica_id = replica_id or uuid.uuid4().hex[:12]
        self._settings = settings
        self._client = client
        self._lookup = client.register_script(LOOKUP)
        self._write = client.register_script(WRITE)
        self._local_in_flight = local_in_flight
        self._metrics = metrics
        self._clock = clock
        self._wall = wall
        self._sleep = sleep
        self._default_capacity = default_capacity
        self._capacity: dict[str, int] = {}
        self._pending: deque[_Op] = deque()
        self._wake = asyncio.Event()
        self._write_lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._prefix = settings.key_prefix if settings.key_prefix.endswith(":") else settings.key_prefix + ":"
        self._deadline = settings.deadline_ms / 1000
        self._retry_at = 0.0
        self._last_tick = 0
        self.degraded = False

    @classmethod
    def from_settings(cls, settings: StateSettings, **kwargs: object) -> RedisStore:
        """A store with its own client for ``settings.redis_url`` (no retries: the deadline rules)."""
        client = Redis.from_url(
            settings.redis_url or "redis://127.0.0.1:6379/0",
            socket_connect_timeout=max(settings.deadline_ms / 1000, 0.05),
            socket_timeout=max(settings.deadline_ms * 10 / 1000, 0.5),
            retry=Retry(NoBackoff(), 0),
            health_check_interval=0,
        )
        return cls(settings, client=client, **kwargs)  # type: ignore[arg-type]

    # -- reads ---------------------------------------------------------------------------------
    def peek(self, endpoints: Sequence[str], key: PrefixKey) -> StoreView | None:
        """The local view while Redis is bypassed (after a failure), else None: Redis needs I/O."""
        if self._clock() < self._retry_at:
            return self.local.view(endpoints, key, degraded=True)
        return None

    async def lookup(self, endpoints: Sequence[str], key: PrefixKey) -> StoreView:
        if self._clock() < self._retry_at:
            return self.local.view(endpoints, key, degraded=True)
        counts = self._local_in_flight()
        s = self._settings
        args: list[object] = [
            self._prefix, self.replica_id, int(self._wall() * 1000), int(s.in_flight_ttl_s * 1000),
            _pack(key.blocks), _affinity(key), len(endpoints), *endpoints,
            *(counts.get(name, 0) for name in endpoints),
        ]
        try:
            async with asyncio.timeout(self._deadline):
                matched, affinity, load = await self._lookup(keys=[], args=args)
        except (RedisError, OSError, TimeoutError) as error:
            self._failed(error)
            return self.local.view(endpoints, key, degraded=True)
        self._succeeded()
        return StoreView(
            dict(zip(endpoints, (int(m) for m in matched), strict=True)),
            frozenset(name for name, hit in zip(endpoints, affinity, strict=True) if hit),
            {name: int(n) for name, n in zip(endpoints, load, strict=True) if n},
        )

    def size(self, endpoint: str) -> int:
        return self.local.size(endpoint)

    @property
    def pending_writes(self) -> int:
        """Writes queued for Redis, not yet sent."""
        return len(self._pending)

    # -- writes ----------------------------------------------------------------------------------
    def record(self, endpoint: str, key: PrefixKey) -> None:
        self.local.record(endpoint, key)
        capacity = self._capacity.get(endpoint, self._default_capacity)
        self._enqueue(("r", endpoint, capacity, _pack(key.blocks), _affinity(key), self._tick()))

    def set_capacity(self, endpoint: str, blocks: int) -> None:
        self.local.set_capacity(endpoint, blocks)
        self._capacity[endpoint] = blocks
        self._enqueue(("k", endpoint, blocks, b"", b"", self._tick()))

    def clear(self, endpoint: str) -> None:
        self.local.clear(endpoint)
        self._enqueue(("c", endpoint, 0, b"", b"", self._tick()))

    def _tick(self) -> int:
        """Write time in ms, strictly increasing: later writes always rank as more recent."""
        self._last_tick = max(int(self._wall() * 1000), self._last_tick + 1)
        return self._last_tick

    def _enqueue(self, op: _Op) -> None:
        if len(self._pending) >= self._settings.max_pending_writes:
            self._pending.popleft()
            self._metrics.fallbacks.labels("write_dropped").inc()
        self._pending.append(op)
        self._wake.set()

    async def flush(self) -> None:
        async with self._write_lock:
            while self._pending:
                batch = [self._pending.popleft() for _ in range(min(_BATCH, len(self._pending)))]
                if self._clock() < self._retry_at:
                    continue  # Redis is being skipped: the local view already has these
                await self._send(batch)

    async def _send(self, batch: list[_Op]) -> None:
        s = self._settings
        args: list[object] = [
            self._prefix, int(s.index_ttl_s * 1000), len(batch), self.replica_id, int(s.change_retention_s * 1000),
        ]
        for op in batch:
            args.extend(op)
        try:
            async with asyncio.timeout(self._deadline * 10):
                await self._write(keys=[], args=args)
        except (RedisError, OSError, TimeoutError) as error:
            self._failed(error)
            return
        self._succeeded()

    # -- health ----------------------------------------------------------------------------------
    def _failed(self, error: BaseException) -> None:
        reason = "timeout" if isinstance(error, TimeoutError) else "error"
        self._metrics.fallbacks.labels(reason).inc()
        self._retry_at = self._clock() + self._settings.retry_after_s
        if not self.degraded:
            log.warning("state store: Redis %s (%s); routing on the local view", reason, str(error) or type(error).__name__)
        self.degraded = True
        self._metrics.degraded.set(1)

    def _succeeded(self) -> None:
        if self.degraded:
            log.info("state store: Redis reachable again")
            self.degraded = False
            self._metrics.degraded.set(0)

    # -- background ----------------------------------------------------------------------------
    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._flush_loop()), asyncio.create_task(self._heartbeat_loop())]

    async def _flush_loop(self) -> None:
        task = asyncio.current_task()
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self.flush()
            raise_if_cancelling(task)

    async def heartbeat(self) -> None:
        """Publish this replica's in-flight counts now (what the heartbeat loop does every ``heartbeat_s``)."""
        if self._clock() >= self._retry_at:
            await self.lookup(list(self._local_in_flight()), _EMPTY)

    async def _heartbeat_loop(self) -> None:
        task = asyncio.current_task()
        while True:
            await self._sleep(self._settings.heartbeat_s)
            await self.heartbeat()
            raise_if_cancelling(task)

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        with contextlib.suppress(RedisError, OSError, TimeoutError):
            async with asyncio.timeout(self._deadline * 10):
                await self.flush()
        await self._client.aclose()

