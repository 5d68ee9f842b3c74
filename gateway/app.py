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
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from opentelemetry.sdk.trace import TracerProvider
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from gateway import __version__
from gateway.admission.gate import AdmissionGate
from gateway.admission.queue import AdmissionQueue
from gateway.admission.saturation import EndpointLoad, endpoint_loads
from gateway.api import admin, admin_config, admin_console, admin_keys, admin_routing, admin_workers, health, openai
from gateway.api.access import AccessMiddleware
from gateway.api.cors import Cors
from gateway.api.edge import Edge, internal_error
from gateway.api.openai import GatewayApp
from gateway.api.openapi import install_openapi
from gateway.api.middleware import RequestIdMiddleware
from gateway.endpoints.health import HealthChecker
from gateway.endpoints.registry import EndpointRegistry
from gateway.endpoints.allowlist import ConnectGuard, Resolver, system_resolver
from gateway.errors import GatewayError, InvalidRequestError, MethodNotAllowedError, NotFoundError
from gateway.observability.metrics import GatewayMetrics
from gateway.api_director import ApiDirector
from gateway.background_usage import BackgroundUsage
from gateway.attempt import Opener
from gateway.closeout import CloseOut
from gateway.observability.loop_lag import LoopLagMonitor
from gateway.operations import Operations
from gateway.protocol import messages
from gateway.protocol.apis import unknown_path
from gateway.protocol.offload import ParseOffload
from gateway.proxy import Proxy
from gateway.selection.catalog import ModelCatalog
from gateway.state.response_affinity import MemoryResponseAffinity, RedisResponseAffinity, ResponseAffinity
from gateway.observability.metrics import AdmissionMetrics, RouteMetrics
from gateway.selection.selector import RouteSelector, spent_from
from gateway.scheduling.service import RoutingRuntime
from gateway.config import PRIORITIES, Settings
from gateway.keys.pricing import TokenUsage, cost_usd
from gateway.upstream.client import AiohttpUpstream, Upstream
from gateway.upstream.native import NativeUpstream
from gateway.turns import TurnGate

if TYPE_CHECKING:
    from backends.workers.supervisor import WorkerSupervisor

log = logging.getLogger("kvgate")


@dataclass
class Container:
    """What one gateway process holds. ``proxy`` and ``upstream`` exist while the app runs."""

    settings: Settings
    clock: Callable[[], float]
    metrics: GatewayMetrics
    registry: EndpointRegistry
    catalog: ModelCatalog
    started_at: int = field(default_factory=lambda: int(time.time()))
    upstream: Upstream | None = None
    proxy: Proxy = None  # type: ignore[assignment]  # set by the lifespan: the director the edge calls
    ops: Operations = None  # type: ignore[assignment]  # set by create_app: admin state, keys and quotas, tracing
    selector: RouteSelector = None  # type: ignore[assignment]  # set by create_app: model or alias -> route, with a reason
    supervisor: WorkerSupervisor | None = None  # managed vLLM workers (kvgate up): /admin/workers
    loop_lag: LoopLagMonitor | None = None  # [metrics] loop_lag_interval_s: the event loop's lag, while the app runs
    response_affinity: ResponseAffinity | None = None  # stored Responses -> their endpoint ([state])

    @staticmethod
    def json(content: Any, status: int = 200) -> Response:
        return Response(orjson.dumps(content), status, media_type="application/json")


def _error_response(error: GatewayError, path: str = "") -> Response:
    """The JSON response for ``error`` (the routes that are not inference; the edge renders those):
    Anthropic's shape under ``/v1/messages``, OpenAI's everywhere else."""
    body = messages.error_body(error) if messages.owns_path(path) else error.body()
    return Response(body, error.status, error.headers, media_type="application/json")


async def _on_gateway_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, GatewayError)
    return _error_response(error, request.url.path)


async def _on_http_exception(request: Request, error: Exception) -> Response:
    assert isinstance(error, StarletteHTTPException)
    path = request.url.path
    if error.status_code == 405:  # Starlette's ``Allow`` is the first matching route's: every route at the path counts
        allowed = _allowed_methods(request) or (error.headers or {}).get("Allow") or (error.headers or {}).get("allow")
        text = f"Method {request.method} is not allowed on {path}" + (f"; allowed: {allowed}." if allowed else ".")
        return _error_response(MethodNotAllowedError(text, headers={"Allow": allowed} if allowed else None), path)
    if error.status_code == 404:
        if path == "/admin" or path.startswith("/admin/"):
            unknown = NotFoundError(f"Unknown admin path: {request.method} {path} (README.md, Operations: admin API).")
            return _error_response(unknown, path)
        return _error_response(unknown_path(request.method, path), path)
    if 400 <= error.status_code < 500:  # e.g. FastAPI's 400 for a body that is not JSON
        invalid = InvalidRequestError(str(error.detail))
        invalid.status = error.status_code
        return _error_response(invalid)
    return _error_response(GatewayError(str(error.detail)))


_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def _allowed_methods(request: Request) -> str | None:
    """Every method some route serves at the request's path (RFC 9110 ``Allow``), sorted; None if
    none. Each method is asked of the router's routes (``Route.matches``: a full match serves it),
    so included routers count without reading FastAPI's internals."""
    routes = request.app.router.routes
    allowed = [
        method for method in _METHODS
        if any(route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes)
    ]
    return ", ".join(allowed) or None


async def _on_validation_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, RequestValidationError)
    problems = []
    for item in error.errors()[:10]:
        where = ".".join(str(part) for part in item.get("loc", ()) if part != "body")
        problems.append(f"{where}: {item.get('msg', 'invalid')}" if where else str(item.get("msg", "invalid")))
    first = next((".".join(str(p) for p in item.get("loc", ())[1:]) for item in error.errors()), None)
    return _error_response(InvalidRequestError("Invalid request: " + "; ".join(problems), param=first or None))


async def _on_unexpected(request: Request, error: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=error)
    request_id = getattr(request.state, "request_id", None)
    headers = {"x-request-id": request_id} if request_id else None  # ServerErrorMiddleware sits outside ours
    return _error_response(internal_error(headers))


def _admin_urls(registry: EndpointRegistry) -> Iterator[str]:
    """The base and health URLs of the endpoints added through the admin API (restricted origins)."""
    for endpoint in registry:
        if endpoint.source == "admin":
            yield endpoint.spec.base_url
            yield endpoint.spec.effective_health_url()


def _director(container: Container, routing: RoutingRuntime, upstream: Upstream, offload: ParseOffload | None) -> Proxy:
    """The director over ``upstream`` (the client, wrapped for spans when tracing is on)."""
    settings = container.settings
    return Proxy(
        selector=container.selector,
        gate=container.ops.gate,
        catalog=container.catalog,
        registry=container.registry,
        scheduler=routing.scheduler,
        opener=Opener(
            upstream, clock=container.clock, max_retry_after_s=settings.upstream.max_retry_after_s,
            max_cooldown_s=settings.upstream.max_rate_limit_cooldown_s, max_attempts=settings.upstream.max_attempts,
        ),
        closeout=CloseOut(
            container.metrics, container.ops.pricing, container.ops.gate, container.ops.requests, clock=container.clock,
            selector=container.selector,
        ),
        metrics=container.metrics,
        admission=_admission_gate(container, routing),
        parse_offload=offload,
    )


def _admission_gate(container: Container, routing: RoutingRuntime) -> AdmissionGate | None:
    """The admission gate of ``[admission]`` (None when off): saturation from the registry's
    snapshot, the stats board's fresh scrapes and route selection's load model; the settings in
    force are read per request (a reload's weights and limits apply; the switch at start-up)."""
    settings = container.settings
    if not settings.admission.enabled:
        return None
    selector, stale_after_s = container.selector, settings.routing.scrape.stale_after_s

    def loads(cluster: str) -> list[EndpointLoad]:
        now, board = container.clock(), routing.board
        config = container.settings.clusters.get(cluster)
        slots = config.selection.slots_per_endpoint if config is not None else 16
        return endpoint_loads(
            container.registry.cluster(cluster), lambda name: board.fresh(name, now, stale_after_s), slots,
            container.settings.admission.kv_saturated,
        )

    def service_s(cluster: str) -> float:
        profile = selector.profiles().get(cluster)
        return selector.tracker.service_s(profile) if profile is not None else 1.0

    def price_usd(cluster: str) -> float:  # one request of the cluster's expected output, for spill budgets
        profile = selector.profiles().get(cluster)
        if profile is None:
            return 0.0
        return cost_usd(profile.price, TokenUsage(0, 0, round(profile.expected_output_tokens)))

    def first_token_s(cluster: str) -> float:  # start to first token there, for the latest spill time
        profile = selector.profiles().get(cluster)
        return selector.tracker.base_ttft_s(profile) if profile is not None else 0.0

    queue = AdmissionQueue(max_depth=settings.admission.max_queue_depth, max_per_key=settings.admission.max_queued_per_key)
    metrics = AdmissionMetrics(container.metrics.registry, PRIORITIES)
    metrics.watch_queue(queue.depth, lambda: container.settings.clusters)
    container.metrics.before_scrape.append(metrics.flush)
    return AdmissionGate(
        lambda: container.settings.admission, queue, loads=loads, service_s=service_s, price_usd=price_usd,
        first_token_s=first_token_s, quantile=settings.route_selection.wait_quantile, metrics=metrics,
    )


def _other_apis(container: Container, settings: Settings) -> BackgroundUsage:
    """Put the director of the other APIs on ``container.proxy``; its background-Responses settler."""
    background = BackgroundUsage(container.proxy._opener._upstream, poll_s=settings.state.background_poll_s,
                                 max_s=settings.state.background_max_s, clock=time.monotonic)
    container.proxy.apis = ApiDirector(container.proxy, lambda: container.settings, container.response_affinity,
                                       background)
    return background


async def _close_apis(background: BackgroundUsage, offload: ParseOffload | None) -> None:
    """Stop the background-Responses pollers (their exchanges settle) and the parse workers."""
    await background.aclose()
    if offload is not None:
        await offload.aclose()


def response_affinity(settings: Settings, redis: Any) -> ResponseAffinity:
    """Where stored responses are recorded -> their endpoint: this process's memory, or Redis
    (``[state] backend``), for ``response_ttl_s`` seconds, at most ``response_max_entries`` here."""
    state = settings.state
    if redis is None:
        return MemoryResponseAffinity(time.time, state.response_ttl_s, state.response_max_entries)
    return RedisResponseAffinity(
        redis, state.key_prefix, time.time, ttl_s=state.response_ttl_s, max_entries=state.response_max_entries,
        deadline_s=max(state.deadline_ms / 1000, 0.25),
    )


def _loop_lag(settings: Settings, metrics: GatewayMetrics) -> LoopLagMonitor | None:
    """The event-loop lag monitor of ``[metrics] loop_lag_interval_s`` (None when 0)."""
    interval = settings.metrics.loop_lag_interval_s
    if interval <= 0:
        return None
    return LoopLagMonitor(
        interval, histogram=metrics.loop_lag, max_gauge=metrics.loop_lag_max, p99_gauge=metrics.loop_lag_p99
    )


def _install_routes(app: FastAPI) -> None:
    """Every route but inference (the edge's), the OpenAPI document and the error handlers."""
    app.router.routes.extend(openai.routes)
    app.include_router(health.router)
    app.include_router(admin.router)
    app.include_router(admin_routing.router)
    app.include_router(admin_config.router)
    app.include_router(admin_keys.router)
    app.include_router(admin_workers.router)
    app.include_router(admin_console.router)
    app.include_router(admin_console.console)
    install_openapi(app)
    app.add_exception_handler(RequestValidationError, _on_validation_error)
    app.add_exception_handler(GatewayError, _on_gateway_error)
    app.add_exception_handler(StarletteHTTPException, _on_http_exception)
    app.add_exception_handler(Exception, _on_unexpected)


def create_app(
    settings: Settings,
    *,
    upstream: Upstream | None = None,
    clock: Callable[[], float] = time.perf_counter,
    health_checks: bool = True,
    config_path: str | Path | None = None,
    tracer_provider: TracerProvider | None = None,
    wall_clock: Callable[[], float] = time.time,
    redis: Any = None,
    resolver: Resolver = system_resolver,
) -> FastAPI:
    """Build the gateway.

    Args:
        settings: validated configuration.
        upstream: the upstream client; default: :class:`NativeUpstream` (or :class:`AiohttpUpstream`, ``upstream.client``) opened at start-up.
        clock: monotonic clock in seconds (injected for tests).
        health_checks: run active health checks in the background.
        config_path: the TOML file ``POST /admin/reload`` re-reads (None: reload is refused).
        tracer_provider: spans go here (tests); default: from ``[tracing]`` (None when off).
        wall_clock: Unix time in seconds, for quota windows and usage days (injected for tests).
        redis: a ``redis.asyncio`` client for the shared state (tests); default: from ``[state]``.
        resolver: host name -> addresses, for the admin API's endpoint allow-list (at registration
            and on every new connection to an admin-added endpoint).

    Raises:
        ConfigError: an endpoint's ``api_key_env`` is not set.
    """
    container = Container(
        settings=settings,
        clock=clock,
        metrics=GatewayMetrics(),
        registry=EndpointRegistry.from_settings(settings.clusters, settings.health, settings.circuit, clock=clock),
        catalog=ModelCatalog.from_settings(settings),
    )
    container.ops = Operations(
        settings,
        registry=container.registry,
        catalog=container.catalog,
        metrics=container.metrics,
        on_settings=lambda new: setattr(container, "settings", new),
        clock=clock,
        wall_clock=wall_clock,
        config_path=config_path,
        tracer_provider=tracer_provider,
        redis=redis,
        resolver=resolver,
    )
    container.metrics.watch_endpoints(lambda: container.registry)
    guard = ConnectGuard(
        lambda: _admin_urls(container.registry), lambda: container.settings.admin.allowed_networks, resolver
    )
    routing = RoutingRuntime(
        settings.routing, settings.state, container.registry, metrics_registry=container.metrics.registry, clock=clock,
        guard=guard, turns=TurnGate(settings.server.heavy_step_bytes, settings.server.heavy_turn_bytes) if settings.server.heavy_step_bytes > 0 else None,
    )
    container.selector = RouteSelector(
        settings=lambda: container.settings,
        catalog=container.catalog,
        registry=container.registry,
        pricing=container.ops.pricing,
        metrics=RouteMetrics(container.metrics.registry, container.metrics.tally),
        spent=spent_from(container.ops.gate),
        board=routing.board,
        stale_after_s=settings.routing.scrape.stale_after_s,
        clock=clock,
    )

    offload = ParseOffload(settings.server.parse_offload_bytes, settings.server.parse_workers) if (
        settings.server.parse_offload_bytes > 0) else None
    container.loop_lag = _loop_lag(settings, container.metrics)
    container.response_affinity = response_affinity(settings, container.ops.redis)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if upstream is not None:
            client: Upstream = upstream
        elif settings.upstream.client == "aiohttp":
            client = AiohttpUpstream(settings.upstream, guard)
        else:
            client = NativeUpstream(settings.upstream, guard)
        container.upstream = client
        container.proxy = _director(container, routing, container.ops.wrap_upstream(client), offload)
        background = _other_apis(container, settings)
        checker = HealthChecker(container.registry, client, settings.health, container.metrics, board=routing.board)
        task = asyncio.create_task(checker.run()) if health_checks else None
        await routing.start()
        await container.ops.start()
        if container.loop_lag is not None:
            container.loop_lag.start()
        try:
            yield
        finally:
            await _close_apis(background, offload)  # before the key gate stops: their settlements are flushed
            if container.loop_lag is not None:
                await container.loop_lag.stop()
            await container.ops.stop()
            await routing.stop()
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await client.aclose()

    app = GatewayApp(title="kvgate", version=__version__, lifespan=lifespan, docs_url="/docs", redoc_url=None)
    app.router.redirect_slashes = False  # Starlette's 307 built its Location from the client's Host header: 404 instead
    app.state.container = container
    app.state.routing = routing
    _install_routes(app)
    # inference: the edge, on every door, whatever the switches; its trace and access log are its own
    app.edge = Edge(
        container,
        tracer=container.ops.tracer,
        access_log=settings.server.access_log,
        log_payloads=settings.logging.log_payloads,
    )
    if container.ops.tracer is not None or settings.server.access_log:  # the other routes' span and log line
        app.add_middleware(
            AccessMiddleware,
            tracer=container.ops.tracer,
            access_log=settings.server.access_log,
            log_payloads=settings.logging.log_payloads,
        )
    app.add_middleware(RequestIdMiddleware)
    app.cors = Cors(app.dispatch, origins) if (origins := settings.server.cors_allow_origins) else None
    return app
