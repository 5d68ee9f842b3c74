"""[io] The metrics scraper: ``GET`` each endpoint's ``/metrics`` on an interval into the stats board.

The URL is the origin of the endpoint's base URL plus ``/metrics`` (vLLM and SGLang serve it
there); a redirect is never followed and an admin-added endpoint is connected to only inside
``admin.allowed_networks`` (``endpoints/allowlist.py``). Each endpoint is scraped concurrently, bounded by ``routing.scrape.timeout_s``; a failed
scrape keeps the previous entry, which ages into staleness. The text is parsed by the pure
:func:`~gateway.endpoints.metrics_parse.parse_engine_stats`. When a scrape shows the engine
restarted (:func:`~gateway.endpoints.metrics_parse.restarted`), ``on_restart`` runs before the
new entry is stored (routing clears that endpoint's prefix index); every new entry is then passed
to ``on_stats`` (routing resizes the index to the reported KV capacity).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import aiohttp

from gateway.endpoints.allowlist import ConnectGuard, GuardedResolver
from gateway.endpoints.metrics_parse import EngineStats, parse_engine_stats, restarted
from gateway.endpoints.model import Endpoint
from gateway.endpoints.registry import EndpointRegistry
from gateway.endpoints.stats import Scrape, StatsBoard
from gateway.config import ScrapeSettings
from gateway.observability.metrics import RoutingMetrics

log = logging.getLogger("kvgate.scraper")

Fetch = Callable[[str, float], Awaitable[str]]
"""``fetch(url, timeout_s) -> body text``; raises on any failure."""


def metrics_url(endpoint: Endpoint) -> str:
    parts = urlsplit(endpoint.spec.base_url)
    return f"{parts.scheme}://{parts.netloc}/metrics"


class AiohttpFetch:
    """The production :data:`Fetch`: its own small aiohttp session (create inside the event loop)."""

    def __init__(self, guard: ConnectGuard | None = None) -> None:
        resolver = GuardedResolver(guard) if guard is not None else None
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=16, resolver=resolver, use_dns_cache=guard is None))

    async def __call__(self, url: str, timeout_s: float) -> str:
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with self._session.get(url, timeout=timeout, allow_redirects=False) as response:  # a 3xx fails
            if response.status != 200:
                raise aiohttp.ClientResponseError(response.request_info, (), status=response.status)
            return await response.text()

    async def aclose(self) -> None:
        await self._session.close()


class MetricsScraper:
    """Scrapes every endpoint of ``registry`` each ``interval_s`` seconds."""

    def __init__(
        self,
        registry: EndpointRegistry,
        board: StatsBoard,
        settings: ScrapeSettings,
        fetch: Fetch,
        metrics: RoutingMetrics,
        *,
        clock: Callable[[], float],
        on_stats: Callable[[Endpoint, Scrape], None],
        on_restart: Callable[[Endpoint], None],
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._registry = registry
        self._board = board
        self._settings = settings
        self._fetch = fetch
        self._metrics = metrics
        self._clock = clock
        self._on_stats = on_stats
        self._on_restart = on_restart
        self._sleep = sleep

    async def scrape(self, endpoint: Endpoint) -> EngineStats | None:
        """One scrape of one endpoint; never raises."""
        try:
            text = await self._fetch(metrics_url(endpoint), self._settings.timeout_s)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as error:
            self._metrics.scrape_failures.labels(endpoint.name).inc()
            log.debug("scrape of %s failed: %s", endpoint.name, error)
            return None
        except Exception:  # never let one endpoint stop the scrapes of the others
            self._metrics.scrape_failures.labels(endpoint.name).inc()
            log.exception("scrape of %s failed", endpoint.name)
            return None
        stats = parse_engine_stats(text)
        if stats is None:
            return None
        previous = self._board.get(endpoint.name)
        if previous is not None and restarted(previous.stats, stats):
            log.info("endpoint %s restarted: clearing its prefix index", endpoint.name)
            self._metrics.restarts.labels(endpoint.name).inc()
            self._on_restart(endpoint)
        self._board.put(endpoint.name, stats, self._clock())
        self._on_stats(endpoint, self._board.get(endpoint.name))  # type: ignore[arg-type]
        return stats

    async def scrape_all(self) -> None:
        await asyncio.gather(*(self.scrape(endpoint) for endpoint in self._registry))

    async def run(self) -> None:
        """Scrape forever (until cancelled)."""
        while True:
            await self.scrape_all()
            await self._sleep(self._settings.interval_s)
