"""Admin changes shared by every gateway replica: a versioned document store and its poller.

What the admin API changes at run time (endpoints added, removed, re-weighted, drained; cluster
prices; API keys; config reloads) is written here as small JSON documents grouped in sections,
and every write bumps one version counter. Each replica polls the store's *stamp* every
``admin.sync_interval_s`` seconds: the version and the store's **epoch**, a random id written
once into an empty store. When either moved it reads the whole snapshot and applies it
(``gateway/live_config.py``). The epoch is what detects a store that lost its data (a Redis restart
without persistence, a flush, a failover to an empty replica): its counter restarts and can come
back to the very value a replica last applied, but the epoch is gone, a new one is written, and
every replica re-reads the (now empty) snapshot at its next poll instead of keeping revoked keys
or missing new ones until the next admin write. Applying a snapshot is idempotent, so a missed poll, a restart or a
Redis failover only delays convergence; pub/sub was not chosen because a message sent while a
replica is disconnected is lost.

Sections (document name -> JSON object):
    ``endpoints``: per endpoint name, an overlay on the config file: ``{"spec": {...}}`` for an
        endpoint added through the API, ``{"removed": true}``, ``{"weight": w}``,
        ``{"draining": bool}`` (fields combine).
    ``clusters``: per cluster name, ``{"price": {...}}``.
    ``keys``: per key id, the stored :class:`~gateway.keys.model.KeyRecord`.
    ``control``: ``reload`` -> ``{"generation": n}``; each replica re-reads its own config file
        when the generation moves.

Redis layout (``P`` = ``state.key_prefix``): one hash ``P admin:SECTION`` per section, the
counter ``P admin:version`` and the epoch ``P admin:epoch`` (``SET NX``, never expires); a write is ``MULTI HSET/HDEL + INCR EXEC``, a snapshot is one
``MULTI GET + HGETALL... EXEC``, so a snapshot never mixes two writes.

Errors: Redis failures raise :class:`~gateway.errors.StateStoreError`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from gateway.errors import StateStoreError

SECTIONS = ("endpoints", "clusters", "keys", "control")

Snapshot = dict[str, dict[str, dict[str, Any]]]

log = logging.getLogger("kvgate.state")


class AdminStore(Protocol):
    async def put(self, section: str, name: str, document: dict[str, Any]) -> int:
        """Store ``document`` under ``section``/``name``; the new version."""

    async def delete(self, section: str, name: str) -> int:
        """Remove a document; the new version."""

    async def version(self) -> int: ...

    async def stamp(self) -> tuple[str, int]:
        """(epoch, version): the epoch changes only when the store lost its data."""

    async def snapshot(self) -> tuple[int, Snapshot]:
        """(version, every section's documents), consistent with each other."""


class MemoryAdminStore:
    """Documents in this process (a single replica)."""

    def __init__(self) -> None:
        self._version = 0
        self._epoch = uuid.uuid4().hex
        self._sections: Snapshot = {section: {} for section in SECTIONS}

    async def put(self, section: str, name: str, document: dict[str, Any]) -> int:
        self._sections[section][name] = orjson.loads(orjson.dumps(document))
        self._version += 1
        return self._version

    async def delete(self, section: str, name: str) -> int:
        self._sections[section].pop(name, None)
        self._version += 1
        return self._version

    async def version(self) -> int:
        return self._version

    async def stamp(self) -> tuple[str, int]:
        return self._epoch, self._version

    async def snapshot(self) -> tuple[int, Snapshot]:
        return self._version, orjson.loads(orjson.dumps(self._sections))


class RedisAdminStore:
    """Documents in Redis, shared by every replica using the same ``prefix``."""

    def __init__(self, client: aioredis.Redis, prefix: str) -> None:
        self._redis = client
        self._version_key = f"{prefix}admin:version"
        self._epoch_key = f"{prefix}admin:epoch"
        self._hash = {section: f"{prefix}admin:{section}" for section in SECTIONS}

    async def _write(self, section: str, name: str, document: dict[str, Any] | None) -> int:
        pipe = self._redis.pipeline(transaction=True)
        if document is None:
            pipe.hdel(self._hash[section], name)
        else:
            pipe.hset(self._hash[section], name, orjson.dumps(document))
        pipe.incr(self._version_key)
        try:
            replies = await pipe.execute()
        except RedisError as error:
            raise StateStoreError(f"admin write failed: {type(error).__name__}") from None
        return int(replies[-1])

    async def put(self, section: str, name: str, document: dict[str, Any]) -> int:
        return await self._write(section, name, document)

    async def delete(self, section: str, name: str) -> int:
        return await self._write(section, name, None)

    async def version(self) -> int:
        try:
            return int(await self._redis.get(self._version_key) or 0)
        except RedisError as error:
            raise StateStoreError(f"admin version read failed: {type(error).__name__}") from None

    async def stamp(self) -> tuple[str, int]:
        """(epoch, version); writes a fresh epoch (``SET NX``) into a store that has none."""
        try:
            epoch, version = await self._redis.mget(self._epoch_key, self._version_key)
            if epoch is None:  # a new store, or one that lost its data: the first poller names the epoch
                await self._redis.set(self._epoch_key, uuid.uuid4().hex, nx=True)
                epoch, version = await self._redis.mget(self._epoch_key, self._version_key)
        except RedisError as error:
            raise StateStoreError(f"admin version read failed: {type(error).__name__}") from None
        return _text(epoch or b""), int(version or 0)

    async def snapshot(self) -> tuple[int, Snapshot]:
        pipe = self._redis.pipeline(transaction=True)
        pipe.get(self._version_key)
        for section in SECTIONS:
            pipe.hgetall(self._hash[section])
        try:
            version, *hashes = await pipe.execute()
        except RedisError as error:
            raise StateStoreError(f"admin snapshot failed: {type(error).__name__}") from None
        snapshot: Snapshot = {}
        for section, fields in zip(SECTIONS, hashes, strict=True):
            documents = {}
            for name, raw in fields.items():
                try:
                    documents[name.decode() if isinstance(name, bytes) else name] = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    log.warning("skipping an unreadable admin document %s/%r", section, name)
            snapshot[section] = documents
        return int(version or 0), snapshot


class AdminSync:
    """Polls ``store`` and hands each new snapshot to ``apply``.

    ``errors`` is called with the operation name on each failed poll (a metric); a failing store
    keeps the last applied state in force.
    """

    def __init__(
        self,
        store: AdminStore,
        apply: Callable[[Snapshot], Awaitable[None]],
        interval_s: float,
        *,
        errors: Callable[[str], None] = lambda operation: None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._store = store
        self._apply = apply
        self._interval_s = interval_s
        self._errors = errors
        self._sleep = sleep
        self.applied_version = -1
        self.applied_epoch: str | None = None
        self._failing = False  # log the first failure and the recovery, not every poll

    async def poll(self) -> bool:
        """One poll; True if a new snapshot was applied. Never raises on store errors."""
        try:
            epoch, version = await self._store.stamp()
            if version == self.applied_version and epoch == self.applied_epoch:
                return False
            version, snapshot = await self._store.snapshot()
        except StateStoreError as error:
            self._errors("admin_sync")
            if not self._failing:
                log.warning("admin sync failing (last applied state stays in force): %s", error.message)
            self._failing = True
            return False
        if self._failing:
            log.info("admin sync recovered")
            self._failing = False
        if self.applied_epoch is not None and epoch != self.applied_epoch:
            log.warning(
                "the state store lost its admin data (epoch %s -> %s): applying its current state; "
                "client auth stays required", self.applied_epoch, epoch,
            )
        await self._apply(snapshot)
        self.applied_version, self.applied_epoch = version, epoch
        return True

    async def run(self) -> None:
        """Poll forever (until cancelled)."""
        while True:
            await self.poll()
            await self._sleep(self._interval_s)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
