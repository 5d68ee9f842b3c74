"""[io] Scheduling's part of the app: builds the scheduler and its collaborators, runs their loops.

``create_app`` builds one :class:`SchedulingService` from the settings: the state store
(``[state] backend`` and ``mode``), the stats board, the closed loop, the prompt hasher and the
:class:`~gateway.scheduling.profile.ProfileScheduler` of the profile ``[routing] policy`` names
(every policy is a profile, the basic ones included). The lifespan calls :meth:`start` (state
store background tasks, the metrics scraper loop when the profile runs the closed loop) and
:meth:`stop`. With ``[routing.kv_events] enabled`` (precise mode) it also owns the KV-event
block sets, their ZMQ subscriber (``scheduling/kv_subscriber.py``; without ``pyzmq``/``msgspec``
the build raises a :class:`~gateway.config.ConfigError`) and the ``/tokenize`` client of the
``tokenize`` producer; an endpoint's restart (seen by the scraper) clears its block set.
``RoutingRuntime`` is its former name, kept as an alias for one release.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry

from gateway.endpoints.model import Endpoint
from gateway.endpoints.registry import EndpointRegistry
from gateway.endpoints.allowlist import ConnectGuard
from gateway.endpoints.scraper import AiohttpFetch, Fetch, MetricsScraper
from gateway.endpoints.stats import Scrape, StatsBoard
from gateway.prefix.hashing import PromptHasher
from gateway.config import RoutingSettings, StateSettings
from gateway.scheduling import kv_subscriber
from gateway.scheduling.feedback import PrefixFeedback
from gateway.scheduling.kv_events import KvBlockSets
from gateway.scheduling.kv_subscriber import KvEventConnections, KvEventSubscriber
from gateway.observability.metrics import RoutingMetrics
from gateway.scheduling.profile import ProfileScheduler
from gateway.scheduling.registry import PluginDeps
from gateway.scheduling.tokens import TokenizeClient
from gateway.state.base import StateStore
from gateway.state.memory import MemoryStore
from gateway.state.redis import RedisStore
from gateway.state.redis_mirror import MirrorStore
from gateway.turns import TurnGate

log = logging.getLogger("kvgate.kv_events")


def build_store(settings: StateSettings, registry: EndpointRegistry, metrics: RoutingMetrics,
                clock: Callable[[], float]) -> StateStore:
    """The configured :class:`~gateway.state.base.StateStore`."""
    if settings.backend == "redis":
        def local_in_flight() -> dict[str, int]:
            return {endpoint.spec.name: endpoint.in_flight for endpoint in registry}

        kind = MirrorStore if settings.mode == "mirror" else RedisStore
        return kind.from_settings(settings, local_in_flight=local_in_flight, metrics=metrics, clock=clock)
    return MemoryStore()


class SchedulingService:
    """Everything endpoint scheduling holds for one app."""

    def __init__(
        self, routing: RoutingSettings, state: StateSettings, registry: EndpointRegistry, *,
        metrics_registry: CollectorRegistry, clock: Callable[[], float] = time.perf_counter,
        rng: random.Random | None = None, fetch: Fetch | None = None, store: StateStore | None = None,
        guard: ConnectGuard | None = None, turns: TurnGate | None = None,
    ) -> None:
        self.settings = routing
        self.metrics = RoutingMetrics(metrics_registry)
        self.registry = registry
        self.board = StatsBoard()
        self.store = store or build_store(state, registry, self.metrics, clock)
        self.feedback = PrefixFeedback(routing.index, self.store, self.metrics, routing.hot_spot.share_half_life)
        self.hasher = PromptHasher(routing.index.block_bytes, routing.index.max_blocks)
        self._clock = clock
        self._fetch = fetch
        self._guard = guard  # admin.allowed_networks on the scraper's connections
        self._owned_fetch: AiohttpFetch | None = None
        self._task: asyncio.Task[None] | None = None
        self.kv = KvBlockSets()
        self.tokenize = TokenizeClient()
        self.kv_subscriber: KvEventSubscriber | None = None
        self.kv_connections: KvEventConnections | None = None
        self._kv_task: asyncio.Task[None] | None = None
        self._kv_connect_task: asyncio.Task[None] | None = None
        for warning in routing.kv_events_warnings(sum(1 for e in registry or () if e.spec.kv_events)):
            log.warning("%s", warning)
        if routing.kv_events.enabled:
            kv_subscriber.require_extra()
            self.kv_subscriber = KvEventSubscriber(
                routing.kv_events.bind, self.kv, kv_subscriber.resolver(lambda: self.registry),
                self.metrics,
            )
            self.kv_connections = KvEventConnections(self.kv_subscriber, self.kv, lambda: self.registry)
        deps = PluginDeps(self.store, rng or random.Random(), self.kv, self.tokenize)
        self.scheduler = ProfileScheduler(
            routing.policy, routing.all_profiles()[routing.policy], routing, deps, hasher=self.hasher,
            board=self.board, feedback=self.feedback, metrics=self.metrics, clock=clock,
        )
        self.scheduler.turns = turns

    @property
    def uses_profile(self) -> bool:
        """Whether the profile runs the closed loop (then engine stats are scraped)."""
        return self.scheduler.closed_loop

    def _on_stats(self, endpoint: Endpoint, scrape: Scrape) -> None:
        self.feedback.on_stats(endpoint.spec.name, scrape)

    def _on_restart(self, endpoint: Endpoint) -> None:
        self.feedback.on_restart(endpoint.spec.name)
        self.kv.clear(endpoint.spec.name)  # a new engine holds nothing (its first batch restarts seq too)

    def scraper(self, fetch: Fetch) -> MetricsScraper:
        return MetricsScraper(
            self.registry, self.board, self.settings.scrape, fetch, self.metrics, clock=self._clock,
            on_stats=self._on_stats, on_restart=self._on_restart,
        )

    async def start(self) -> None:
        await self.store.start()
        if self.kv_subscriber is not None:
            if self.settings.kv_events.bind:
                self._kv_task = await kv_subscriber.start(self.kv_subscriber)
            assert self.kv_connections is not None
            self.kv_connections.sync()  # endpoints with a kv_events address: subscribed before the first request
            self._kv_connect_task = asyncio.create_task(self.kv_connections.run(), name="kv-events-connect")
        if self.uses_profile and self.settings.scrape.enabled:
            fetch = self._fetch
            if fetch is None:
                fetch = self._owned_fetch = AiohttpFetch(self._guard)
            self._task = asyncio.create_task(self.scraper(fetch).run())

    async def stop(self) -> None:
        for task in (self._task, self._kv_task, self._kv_connect_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = self._kv_task = self._kv_connect_task = None
        if self.kv_connections is not None:
            await self.kv_connections.aclose()  # also when its task was cancelled before it ever ran
        if self.kv_subscriber is not None:
            self.kv_subscriber.close()
        await self.tokenize.aclose()
        if self._owned_fetch is not None:
            await self._owned_fetch.aclose()
            self._owned_fetch = None
        await self.store.aclose()


RoutingRuntime = SchedulingService
"""Deprecated name of :class:`SchedulingService` (``gateway/app.py`` may still import it)."""
