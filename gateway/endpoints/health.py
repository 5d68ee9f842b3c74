"""Active health checks: ``GET`` each endpoint's health URL on an interval.

vLLM answers ``GET /health`` with 200 and an empty body while its engine is alive. A check
passes on any 2xx within ``health.timeout_s``; thresholds (``health.unhealthy_threshold``,
``health.healthy_threshold``) are applied by :class:`~gateway.endpoints.model.Endpoint`.

With ``health.probe = "generation"`` a passing health URL is followed by a real generation: a
text completion of one token (``max_tokens: 1``, greedy) on the endpoint's served model. It uses
``/completions`` rather than chat so that no chat template or reasoning parser is involved; a
reasoning model answers it like any other. Its answer must be 200 with a ``choices`` array.

Checks are independent: an endpoint whose check raises anything (a URL that slipped past
validation, a bug) is counted as failing its check and logged; the others go on being checked.

Each check also judges progress from the latest scraped engine metrics (``endpoints/stall.py``):
an endpoint whose requests run but whose generated-token counter has not moved for
``health.stall_s`` seconds is marked stalled and takes no new requests until it moves again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import orjson

from gateway.endpoints.model import Endpoint, Health
from gateway.endpoints.registry import EndpointRegistry
from gateway.endpoints.stall import StallDetector
from gateway.endpoints.stats import StatsBoard
from gateway.errors import GatewayError
from gateway.observability.metrics import GatewayMetrics
from gateway.config import HealthSettings
from gateway.upstream.client import Upstream

log = logging.getLogger("kvgate.health")


class HealthChecker:
    """Checks every endpoint of ``registry`` each ``interval_s`` seconds."""

    def __init__(
        self,
        registry: EndpointRegistry,
        upstream: Upstream,
        settings: HealthSettings,
        metrics: GatewayMetrics,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        board: StatsBoard | None = None,
    ) -> None:
        self._board = board
        self._stalls = StallDetector(settings.stall_s)
        self._registry = registry
        self._upstream = upstream
        self._settings = settings
        self._metrics = metrics
        self._sleep = sleep

    async def check(self, endpoint: Endpoint) -> None:
        """One check of one endpoint; never raises."""
        url = endpoint.spec.effective_health_url()
        before = endpoint.health
        try:
            status = await self._upstream.probe(url, self._settings.timeout_s)
            ok, reason = 200 <= status < 300, f"health check HTTP {status}"
            if ok and self._settings.probe == "generation":
                ok, reason = await self._generate(endpoint)
        except GatewayError as error:
            ok, reason = False, error.message
        except Exception as error:  # never let one endpoint's fault stop the checks of the others
            log.exception("health check of %s failed", endpoint.name)
            ok, reason = False, f"health check failed ({type(error).__name__})"
        endpoint.record_check(ok, None if ok else reason)
        self._judge_progress(endpoint)
        self._metrics.healthy.labels(endpoint.name).set(1 if endpoint.health is Health.HEALTHY else 0)
        if endpoint.health is not before:
            log.info("endpoint %s: %s -> %s (%s)", endpoint.name, before.value, endpoint.health.value, reason if not ok else "ok")

    def _judge_progress(self, endpoint: Endpoint) -> None:
        """Mark the endpoint stalled while its scraped metrics show running requests but no new tokens."""
        scrape = self._board.get(endpoint.name) if self._board is not None else None
        if scrape is None:
            return
        stalled = self._stalls.observe(endpoint.name, scrape.stats, scrape.at)
        if stalled != endpoint.stalled:
            endpoint.stalled = stalled
            log.warning("endpoint %s %s", endpoint.name, "stalled: running requests, no new tokens" if stalled else "makes progress again")
            if stalled:
                endpoint.last_error = f"stalled: no tokens generated for {self._settings.stall_s:g} s"

    async def _generate(self, endpoint: Endpoint) -> tuple[bool, str]:
        body = orjson.dumps({"model": endpoint.spec.served_model, "prompt": "Hello", "max_tokens": 1, "temperature": 0})
        headers = {"Content-Type": "application/json"}
        if endpoint.spec.api_key:
            headers["Authorization"] = f"Bearer {endpoint.spec.api_key}"
        response = None
        try:
            async with asyncio.timeout(self._settings.timeout_s):
                response = await self._upstream.post(endpoint.spec.base_url + "/completions", body, headers, self._settings.timeout_s)
                raw = await response.read()
        except TimeoutError:
            if response is not None:
                response.close()
            return False, f"generation probe: no answer in {self._settings.timeout_s:g} s"
        if response.status != 200 or b'"choices"' not in raw:
            return False, f"generation probe: HTTP {response.status}"
        return True, "ok"

    async def check_all(self) -> None:
        """One check of every endpoint, concurrently; one endpoint's failure never stops another's."""
        results = await asyncio.gather(*(self.check(endpoint) for endpoint in self._registry), return_exceptions=True)
        for result in results:
            if isinstance(result, Exception):
                log.error("health check failed", exc_info=result)

    async def run(self) -> None:
        """Check forever (until cancelled)."""
        while True:
            try:
                await self.check_all()
            except Exception:  # e.g. the registry changed shape mid-iteration: next round
                log.exception("health check round failed")
            await self._sleep(self._settings.interval_s)
