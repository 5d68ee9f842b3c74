"""[io] The Redis store's mirror mode (``[state] mode = "mirror"``, the default with Redis).

:class:`MirrorStore` answers the per-request lookup from a **local mirror** of the shared state
instead of a Redis round trip: every endpoint's prefix index (one bounded
:class:`~gateway.prefix.index.BlockLRU` each, as the memory store keeps) and the other replicas'
in-flight counts. The request path then costs what the memory store's does.

Refresh (one background loop, every ``refresh_ms``, one :data:`~gateway.state.redis_scripts.SYNC`
call): push this replica's batched writes, publish its in-flight counts (its heartbeat), read the
other live replicas' counts and the change stream ``Pchanges`` after the last entry read (every
``WRITE`` call appends its operations there, in either mode), and replay the other replicas'
operations (record, capacity, clear) into the mirror. Entries carry a sequence number: a gap
(the stream was trimmed past this replica, expired, or Redis restarted) makes the mirror
**reload**: a snapshot of every ``Pidx:*`` set (``SCAN`` + chunked ``ZRANGE``), started from the
stream's head so nothing written meanwhile is lost. It also reloads at start.

Why a pull of a change stream rather than pub/sub: one call per interval carries every change
since the last one however many replicas write (pub/sub wakes the loop once per message),
needs no second connection, and the sequence numbers tell a reader exactly when it missed
something (a pub/sub subscriber that reconnects cannot know what it lost).

Staleness bound: a write or in-flight change by another replica is in this mirror within
**2 x refresh_ms + deadline_ms** (its batch waits at most one interval there, the pull at most
one here, plus the call): 105 ms with the defaults (40 ms, 25 ms), while Redis is healthy.
This replica's own writes apply to the mirror at once (it always sees its own routing).

Misses (``mirror_misses``): a prompt whose first block the mirror holds nowhere (no affinity
either) asks Redis once with the direct lookup (``redis``, the default), so the first placement
of a new prefix is coordinated exactly as in direct mode, and the answer is kept in the mirror;
``local`` routes on the mirror alone (no round trip per request at all). A record of blocks the
mirror already holds is a **touch**: touches are deduplicated (one per endpoint and prompt) and
sent with the next refresh; a record that adds blocks, a clear and a capacity change wake the
writer at once, so other replicas' miss lookups find them.

TTLs: entries carry their write time; those older than ``index_ttl_s`` are dropped each refresh,
as Redis drops them (and the key expires). A crashed replica's counts vanish with its in-flight
TTL. Degradation as the direct mode: a failed call marks the store degraded and skips Redis for
``retry_after_s``; lookups keep answering from the mirror (``degraded=True``, no remote counts).
Memory: the mirror holds at most each endpoint's capacity (the writers' capacities, as Redis);
pending touches at most ``max_pending_writes``.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Sequence
from typing import Any

from redis.exceptions import RedisError

from gateway.config import StateSettings
from gateway.prefix.hashing import PrefixKey
from gateway.prefix.index import PrefixIndex
from gateway.state.base import StoreView, raise_if_cancelling
from gateway.state.redis import RedisStore, _affinity, _pack
from gateway.state.redis_scripts import HEAD, SYNC

log = logging.getLogger("kvgate.state")

_PULL = 512  # stream entries per SYNC call
_PULLS = 8  # SYNC calls per refresh at most (a backlog waits for the next refresh)
_CHUNK = 10_000  # ZRANGE members per call while reloading
_ERRORS = (RedisError, OSError, TimeoutError)
_Touch = tuple[str, tuple[int, ...], int | None]


def _unpack(blob: bytes) -> tuple[int, ...]:
    return struct.unpack(f">{len(blob) // 8}Q", blob)


def _glob(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


def _replay(index: PrefixIndex, op: Sequence[bytes]) -> None:
    """Apply one stream operation (kind, endpoint, capacity, blocks, affinity, time) to ``index``."""
    kind, endpoint, capacity, blob, affinity, stamp = op
    name = endpoint.decode()
    if kind == b"c":
        lru = index.peek(name)
        if lru is not None:
            lru.clear()
        return
    lru = index.lru(name)
    cap = int(capacity)
    if cap != lru.capacity:
        lru.resize(cap)
    if kind == b"r":
        lru.touch(_unpack(blob), _unpack(affinity) if affinity else (), int(float(stamp)))


class MirrorStore(RedisStore):
    """See the module docstring; built like :class:`~gateway.state.redis.RedisStore`."""

    def __init__(self, settings: StateSettings, **kwargs: Any) -> None:
        super().__init__(settings, **kwargs)
        self._sync = self._client.register_script(SYNC)
        self._head = self._client.register_script(HEAD)
        self._refresh_s = settings.refresh_ms / 1000
        self._ask_on_miss = settings.mirror_misses == "redis"
        self._touches: dict[_Touch, tuple[int, int]] = {}  # (endpoint, blocks, affinity) -> (capacity, ms)
        self._remote: dict[str, int] = {}  # endpoint -> other live replicas' in-flight, as last pulled
        self._last_id: str | None = None  # the last stream entry applied; None: load first
        self._last_seq = 0
        self._me = self.replica_id.encode()
        self.reloads = 0

    # -- reads ---------------------------------------------------------------------------------
    def peek(self, endpoints: Sequence[str], key: PrefixKey) -> StoreView | None:
        """The mirror's answer; None for a prompt matched nowhere while misses ask Redis."""
        matched, holding = self.local.index.match_all(endpoints, key.blocks, key.affinity)
        if (self._ask_on_miss and endpoints and not holding and key.blocks and not any(matched.values())
                and self._clock() >= self._retry_at):
            return None
        degraded = self.degraded
        remote = self._remote
        load = {name: remote[name] for name in endpoints if name in remote} if remote and not degraded else {}
        return StoreView(matched, frozenset(holding), load, degraded)

    async def lookup(self, endpoints: Sequence[str], key: PrefixKey) -> StoreView:
        view = self.peek(endpoints, key)
        if view is not None:
            return view
        view = await super().lookup(endpoints, key)  # a miss: one direct lookup
        if not view.degraded:
            stamp = int(self._wall() * 1000)
            for name, blocks in view.matched.items():
                if blocks:
                    self.local.index.lru(name).touch(key.blocks[:blocks], (), stamp)
            if key.affinity is not None:
                for name in view.affinity:
                    self.local.index.lru(name).touch((), (key.affinity,), stamp)
        return view

    # -- writes ----------------------------------------------------------------------------------
    def record(self, endpoint: str, key: PrefixKey) -> None:
        lru = self.local.index.lru(endpoint)
        blocks, affinity = key.blocks, key.affinity
        known = (not blocks or lru.match(blocks) == len(blocks)) and (affinity is None or affinity in lru)
        capacity = self._capacity.get(endpoint, self._default_capacity)
        if not known:
            tick = self._tick()
            lru.touch(blocks, () if affinity is None else (affinity,), tick)
            self._enqueue(("r", endpoint, capacity, _pack(blocks), _affinity(key), tick))
            return
        stamp = int(self._wall() * 1000)
        lru.touch(blocks, () if affinity is None else (affinity,), stamp)
        touches = self._touches
        entry = (endpoint, blocks, affinity)
        if entry not in touches and len(touches) >= self._settings.max_pending_writes:
            del touches[next(iter(touches))]
            self._metrics.fallbacks.labels("write_dropped").inc()
        touches[entry] = (capacity, stamp)

    def clear(self, endpoint: str) -> None:
        self._touches = {entry: value for entry, value in self._touches.items() if entry[0] != endpoint}
        super().clear(endpoint)

    async def flush(self) -> None:
        if self._touches:
            touches, self._touches = self._touches, {}
            ops = [
                ("r", name, cap, _pack(blocks), b"" if aff is None else struct.pack(">Q", aff), stamp)
                for (name, blocks, aff), (cap, stamp) in touches.items()
            ]
            merged = sorted([*self._pending, *ops], key=lambda op: op[5])
            self._pending.clear()
            self._pending.extend(merged)
        await super().flush()

    @property
    def pending_writes(self) -> int:
        return len(self._pending) + len(self._touches)

    # -- refresh ---------------------------------------------------------------------------------
    async def heartbeat(self) -> None:
        await self.refresh()

    async def refresh(self) -> None:
        """One refresh: expire, push batched writes, then pull (publishing in-flight) or reload."""
        self._expire()
        if self._clock() < self._retry_at:
            return
        if self._touches:
            await self.flush()
        if self._last_id is None and not await self._reload():
            return
        for _ in range(_PULLS):
            pulled = await self._pull()
            if pulled is None or pulled < _PULL:
                return

    async def _pull(self) -> int | None:
        """One SYNC call; entries applied, or None after a failure or a reload."""
        counts = self._local_in_flight()
        s = self._settings
        args: list[object] = [
            self._prefix, self.replica_id, int(self._wall() * 1000), int(s.in_flight_ttl_s * 1000),
            self._last_id or "", _PULL, len(counts), *counts, *counts.values(),
        ]
        try:
            async with asyncio.timeout(self._deadline * 10):
                load, entries, seq = await self._sync(keys=[], args=args)
        except _ERRORS as error:
            self._failed(error)
            return None
        self._succeeded()
        self._remote = {load[i].decode(): int(load[i + 1]) for i in range(0, len(load), 2) if int(load[i + 1])}
        if not self._apply(entries) or (len(entries) < _PULL and self._last_seq != int(seq)):
            await self._reload()  # entries were missed (trimmed, expired, Redis restarted)
            return None
        return len(entries)

    def _apply(self, entries: list[Any]) -> bool:
        """Replay other replicas' entries in order; False at a gap in the sequence."""
        index = self.local.index
        for entry_id, fields in entries:
            seq = int(fields[1])
            if seq != self._last_seq + 1:
                return False
            self._last_seq, self._last_id = seq, entry_id.decode()
            if fields[3] == self._me:
                continue
            for at in range(4, len(fields), 6):
                _replay(index, fields[at : at + 6])
        return True

    async def _reload(self) -> bool:
        """Replace the mirror by a snapshot of every endpoint's index, then re-apply this
        replica's writes not yet sent. No write of this replica is sent meanwhile (the lock)."""
        try:
            async with self._write_lock:
                async with asyncio.timeout(max(self._deadline * 40, 1.0)):
                    seq, last_id = await self._head(keys=[], args=[self._prefix])
                    index = await self._snapshot()
                for op in self._pending:
                    _replay(index, [str(field).encode() if not isinstance(field, bytes) else field for field in op])
                for (name, blocks, aff), (_, stamp) in self._touches.items():
                    index.lru(name).touch(blocks, () if aff is None else (aff,), stamp)
        except _ERRORS as error:
            self._failed(error)
            return False
        self._succeeded()
        self.local.index = index
        self._last_seq, self._last_id = int(seq), last_id.decode()
        self.reloads += 1
        return True

    async def _snapshot(self) -> PrefixIndex:
        index = PrefixIndex(self._default_capacity)
        client, start = self._client, len(self._prefix) + len("idx:")
        async for key in client.scan_iter(match=_glob(self._prefix) + "idx:*", count=1000):
            members: list[tuple[bytes, float]] = []
            while True:
                chunk = await client.zrange(key, len(members), len(members) + _CHUNK - 1, withscores=True)
                members.extend(chunk)
                if len(chunk) < _CHUNK:
                    break
            if not members:
                continue
            name = key[start:].decode()
            lru = index.lru(name)
            lru.resize(max(len(members), self._capacity.get(name, self._default_capacity)))
            lru.load((_unpack(member)[0], int(score)) for member, score in members)
        return index

    def _expire(self) -> None:
        before = int((self._wall() - self._settings.index_ttl_s) * 1000)
        index = self.local.index
        for name in index.names():
            lru = index.peek(name)
            if lru is not None:
                lru.expire(before)

    # -- background ----------------------------------------------------------------------------
    async def start(self) -> None:
        await self.refresh()  # the mirror is loaded before the first request (or degraded)
        self._tasks = [asyncio.create_task(self._flush_loop()), asyncio.create_task(self._refresh_loop())]

    async def _refresh_loop(self) -> None:
        task = asyncio.current_task()
        while True:
            await self._sleep(self._refresh_s)
            try:
                await self.refresh()
            except asyncio.CancelledError:
                raise
            except Exception:  # a malformed stream entry must not freeze the mirror: reload next round
                log.exception("state mirror: refresh failed; reloading from Redis on the next round")
                self._last_id = None
            raise_if_cancelling(task)
