"""The operations side of one gateway app: admin state, keys and quotas, accounting, tracing.

``create_app`` builds one :class:`Operations` next to the proxy. It owns:

* the state stores: Redis when ``[state] backend = "redis"`` (shared by every replica; one
  client with ``quotas.store_timeout_s`` socket timeouts), else in-process stores;
* the :class:`~gateway.live_config.Runtime` (config file + admin overlay, reload, sync loop);
* the :class:`~gateway.keys.gate.KeyGate` (authentication, quotas, usage settlement loop);
* the per-request record (:class:`~gateway.observability.request_log.RequestLog`) that the
  close-out (``gateway/closeout.py``) writes and the admin API lists;
* tracing: a tracer provider from ``[tracing]`` (or one passed in by tests) and the upstream
  wrapper that makes client spans. With tracing off, nothing is wrapped.

Lifecycle: :meth:`start` applies the state store's admin overlay once, then runs the sync and
settlement loops; :meth:`stop` cancels them, writes what is still queued, and closes what it
opened (never a provider or Redis client passed in).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from opentelemetry.sdk.trace import TracerProvider
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from gateway.endpoints.allowlist import Resolver, system_resolver
from gateway.endpoints.registry import EndpointRegistry
from gateway.keys.gate import KeyGate
from gateway.keys.model import config_keys
from gateway.keys.pricing import Pricing
from gateway.keys.quota_store import MemoryQuotaStore, RedisQuotaStore
from gateway.keys.table import KeyTable
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.request_log import RequestLog
from gateway.observability.tracing import TracedUpstream, build_tracer_provider
from gateway.selection.catalog import ModelCatalog
from gateway.live_config import Runtime
from gateway.config import Settings
from gateway.state.admin_sync import MemoryAdminStore, RedisAdminStore


def redis_client(settings: Settings) -> aioredis.Redis:
    """A client for ``state.redis_url`` that fails fast (no retries; the caller decides)."""
    timeout = settings.quotas.store_timeout_s
    return aioredis.Redis.from_url(
        settings.state.redis_url,
        socket_connect_timeout=timeout,
        socket_timeout=timeout,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
    )


class Operations:
    """See the module docstring."""

    def __init__(  # noqa: PLR0913  # the operations side's inputs: each clock, store, provider and resolver is a seam tests inject
        self,
        settings: Settings,
        *,
        registry: EndpointRegistry,
        catalog: ModelCatalog,
        metrics: GatewayMetrics,
        on_settings: Callable[[Settings], None],
        clock: Callable[[], float] = time.perf_counter,
        wall_clock: Callable[[], float] = time.time,
        config_path: str | Path | None = None,
        tracer_provider: TracerProvider | None = None,
        redis: aioredis.Redis | None = None,
        resolver: Resolver = system_resolver,
    ) -> None:
        self._own_redis = redis is None and settings.state.backend == "redis"
        self.redis = redis if redis is not None else (redis_client(settings) if self._own_redis else None)
        prefix = settings.state.key_prefix.rstrip(":") + ":"
        self.metrics = metrics
        self.resolver = resolver
        self.pricing = Pricing.from_settings(settings.clusters)
        errors = self._store_error
        if self.redis is not None:
            quota_store: Any = RedisQuotaStore(self.redis, prefix, settings.quotas.usage_retention_days)
            admin_store: Any = RedisAdminStore(self.redis, prefix)
        else:
            quota_store, admin_store = MemoryQuotaStore(), MemoryAdminStore()
        self.gate = KeyGate(
            KeyTable(config_keys(settings.auth), required=settings.auth.required),
            quota_store,
            on_store_error=settings.quotas.on_store_error,
            store_errors=errors,
            quota_refusals=lambda key, limit: metrics.quota_refusals.labels(key.name, limit).inc(),
            wall_clock=wall_clock,
            catalog=catalog,
            settle_interval_s=settings.quotas.settle_interval_s,
        )
        self.runtime = Runtime(
            settings=settings,
            config_path=config_path,
            registry=registry,
            catalog=catalog,
            pricing=self.pricing,
            keys=self.gate.table,
            store=admin_store,
            on_settings=on_settings,
            clock=clock,
            errors=errors,
        )
        self.requests = RequestLog(settings.admin.request_log_size, wall_clock)
        self._own_provider = tracer_provider is None
        self.tracer_provider = tracer_provider if tracer_provider is not None else build_tracer_provider(settings.tracing)
        self.tracer = self.tracer_provider.get_tracer("kvgate") if self.tracer_provider is not None else None
        self._tasks: list[asyncio.Task[None]] = []

    def _store_error(self, operation: str) -> None:
        self.metrics.state_store_errors.labels(operation).inc()

    def wrap_upstream(self, upstream: Any) -> Any:
        """The upstream client, wrapped for client spans when tracing is on."""
        return TracedUpstream(upstream) if self.tracer is not None else upstream

    async def start(self) -> None:
        await self.runtime.sync.poll()
        self._tasks = [asyncio.create_task(self.runtime.sync.run()), asyncio.create_task(self.gate.run())]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        await self.gate.flush()
        if self._own_provider and self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self._own_redis and self.redis is not None:
            await self.redis.aclose()
