"""Application factory: ``create_app(settings)`` builds one :class:`Container` and the ASGI app.

Everything the gateway holds (settings, metrics registry, endpoint registry, upstream pool,
proxy) lives in the container, built here; there is no module-level state. The lifespan opens
the upstream pool, runs the first health check of every endpoint, keeps checking in the
background, and closes it all on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi import FastAPI, Request, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway import __version__
from gateway.api import admin, health, openai
from gateway.api.auth import KeyChecker
from gateway.api.middleware import RequestIdMiddleware
from gateway.endpoints.health import HealthChecker
from gateway.endpoints.registry import EndpointRegistry
from gateway.errors import GatewayError, MethodNotAllowedError, NotFoundError
from gateway.observability.metrics import GatewayMetrics
from gateway.proxy import Proxy
from gateway.routes.catalog import ModelCatalog
from gateway.routing.scheduler import SCHEDULERS
from gateway.settings import Settings
from gateway.upstream.client import AiohttpUpstream, Upstream

log = logging.getLogger("kvgate")


@dataclass
class Container:
    """What one gateway process holds. ``proxy`` and ``upstream`` exist while the app runs."""

    settings: Settings
    clock: Callable[[], float]
    metrics: GatewayMetrics
    registry: EndpointRegistry
    catalog: ModelCatalog
    keys: KeyChecker
    started_at: int = field(default_factory=lambda: int(time.time()))
    upstream: Upstream | None = None
    proxy: Proxy | None = None

    @staticmethod
    def json(content: Any, status: int = 200) -> Response:
        return Response(orjson.dumps(content), status, media_type="application/json")


def _error_response(error: GatewayError) -> Response:
    return Response(error.body(), error.status, error.headers, media_type="application/json")


async def _on_gateway_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, GatewayError)
    return _error_response(error)


async def _on_http_exception(request: Request, error: Exception) -> Response:
    assert isinstance(error, StarletteHTTPException)
    if error.status_code == 405:
        return _error_response(MethodNotAllowedError(f"Method {request.method} is not allowed on {request.url.path}."))
    if error.status_code == 404:
        return _error_response(NotFoundError(f"Unknown path: {request.method} {request.url.path}."))
    return _error_response(GatewayError(str(error.detail)))


async def _on_unexpected(request: Request, error: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=error)
    return _error_response(GatewayError("The gateway had an internal error. It has been logged."))


def create_app(
    settings: Settings,
    *,
    upstream: Upstream | None = None,
    clock: Callable[[], float] = time.perf_counter,
    health_checks: bool = True,
) -> FastAPI:
    """Build the gateway.

    Args:
        settings: validated configuration.
        upstream: the upstream client; default: an :class:`AiohttpUpstream` opened at start-up.
        clock: monotonic clock in seconds (injected for tests).
        health_checks: run active health checks in the background.

    Raises:
        ConfigError: an endpoint's ``api_key_env`` is not set.
    """
    container = Container(
        settings=settings,
        clock=clock,
        metrics=GatewayMetrics(),
        registry=EndpointRegistry.from_settings(settings, clock=clock),
        catalog=ModelCatalog.from_settings(settings),
        keys=KeyChecker(key.get_secret_value() for key in settings.auth.api_keys),
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = upstream or AiohttpUpstream(settings.upstream)
        container.upstream = client
        container.proxy = Proxy(
            catalog=container.catalog,
            registry=container.registry,
            scheduler=SCHEDULERS[settings.routing.policy](),
            upstream=client,
            metrics=container.metrics,
            max_attempts=settings.upstream.max_attempts,
            max_retry_after_s=settings.upstream.max_retry_after_s,
            clock=clock,
        )
        checker = HealthChecker(container.registry, client, settings.health, container.metrics)
        task = asyncio.create_task(checker.run()) if health_checks else None
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await client.aclose()

    app = FastAPI(title="kvgate", version=__version__, lifespan=lifespan, docs_url="/docs", redoc_url=None)
    app.state.container = container
    app.router.routes.extend(openai.routes)
    app.include_router(health.router)
    app.include_router(admin.router)
    app.add_exception_handler(GatewayError, _on_gateway_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_exception)
    app.add_exception_handler(Exception, _on_unexpected)
    app.add_middleware(RequestIdMiddleware)
    return app
