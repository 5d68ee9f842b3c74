"""The admin REST API under ``/admin``: guarded by the admin key, never by a client key.

``Authorization: Bearer ADMIN_KEY`` is compared in constant time (``hmac.compare_digest``).
Without ``admin.api_key`` configured, every ``/admin`` route answers 404 (the API is off).
A missing or wrong key gets 401; a client key is just a wrong key here.

Routes (more are added by feature routers that depend on :func:`require_admin`:
``admin_config.py`` for clusters, routes, reload and stats, ``admin_keys.py`` for API keys):
    ``GET /admin/endpoints[/NAME]``: endpoints with cluster, URL, source (config, admin,
        managed), health, circuit state, draining, in-flight, weight, last error, mean latency,
        prefix-index size and ``engine``: the latest scrape of its ``/metrics`` (queue, running,
        KV usage, the engine's prefix-cache hit rate from its counters, KV capacity, age in
        seconds), or null before the first scrape.
    ``POST /admin/endpoints``: add one; its URL must resolve inside ``admin.allowed_networks``
        and not be the gateway itself (``gateway/endpoints/allowlist.py``).
    ``DELETE /admin/endpoints/NAME``: remove (requests in flight finish).
    ``PATCH /admin/endpoints/NAME`` (``weight``, ``draining``), ``POST .../drain``, ``.../undrain``.
    ``POST /admin/endpoints/NAME/reset``: drop the admin changes to a config endpoint.

Changes are written to the state store and applied by ``gateway/live_config.py`` on every replica.
Request bodies that fail validation get 400 ``invalid_request_error``.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import ConfigDict, Field

from gateway.endpoints.allowlist import check_url, parse_networks
from gateway.errors import AuthenticationError, ConflictError, InvalidRequestError, NotFoundError
from gateway.config import StrictNumbers, redact_url

_NO_ENDPOINT = {"description": "No such endpoint"}
_UNAUTHORIZED = {401: {"description": "Missing or wrong admin key"}, 404: {"description": "Admin API disabled"}}


def require_admin(request: Request) -> None:
    """FastAPI dependency: allow only the admin key.

    Raises:
        NotFoundError: (404) the admin API is disabled (no ``admin.api_key``).
        AuthenticationError: (401) missing or wrong key.
    """
    configured = request.app.state.container.settings.admin.api_key
    if configured is None or not configured.get_secret_value():
        raise NotFoundError("The admin API is disabled: set admin.api_key (KVGATE__ADMIN__API_KEY).")
    scheme, _, presented = (request.headers.get("authorization") or "").partition(" ")
    expected = configured.get_secret_value().encode()
    if scheme.lower() != "bearer" or not hmac.compare_digest(presented.strip().encode(), expected):
        raise AuthenticationError("A valid admin key is required (Authorization: Bearer ADMIN_KEY).")


router = APIRouter(prefix="/admin", tags=["admin"], dependencies=[Depends(require_admin)], responses=_UNAUTHORIZED)


def _latencies(container: Any) -> dict[str, tuple[float, float]]:
    """Endpoint name -> (answered requests, mean E2E seconds) from this replica's histogram."""
    totals: dict[str, list[float]] = {}
    container.metrics.tally.flush()  # the close-out's pending observations (observability/tally.py)
    for family in container.metrics.endpoint_duration.collect():
        for sample in family.samples:
            if sample.name.endswith(("_count", "_sum")):
                entry = totals.setdefault(sample.labels["endpoint"], [0.0, 0.0])
                entry[0 if sample.name.endswith("_count") else 1] = sample.value
    return {name: (count, total / count if count else 0.0) for name, (count, total) in totals.items()}


def _prefix_store(request: Request) -> Any:
    """The routing state store (prefix index), if the app has one."""
    routing = getattr(request.app.state, "routing", None)
    return getattr(routing, "store", None)


def _engine(request: Request, name: str) -> dict[str, Any] | None:
    """The endpoint's latest engine scrape (``endpoints/stats.py``), or None."""
    board = getattr(getattr(request.app.state, "routing", None), "board", None)
    scrape = board.get(name) if board is not None else None
    if scrape is None:
        return None
    s = scrape.stats
    return {
        "engine": s.engine, "waiting": s.waiting, "running": s.running, "kv_usage": s.kv_usage,
        "prefix_queries": s.prefix_queries, "prefix_hits": s.prefix_hits,
        "prefix_hit_rate": s.prefix_hits / s.prefix_queries if s.prefix_hits is not None and s.prefix_queries else None,
        "capacity_tokens": s.capacity_tokens, "block_size": s.block_size,
        "age_s": round(request.app.state.container.clock() - scrape.at, 3),
    }


def endpoint_view(
    endpoint: Any, latencies: dict[str, tuple[float, float]], prefix_store: Any = None, request: Request | None = None
) -> dict[str, Any]:
    """What the admin API shows about one endpoint (``engine`` only when given the ``request``)."""
    count, mean = latencies.get(endpoint.name, (0.0, 0.0))
    return {
        "name": endpoint.name,
        "cluster": endpoint.spec.cluster,
        "url": redact_url(endpoint.spec.base_url),  # a config URL may carry user:password@
        "model": endpoint.spec.served_model,
        "source": endpoint.source,
        "health": endpoint.health.value,
        "circuit": endpoint.circuit.value,
        "draining": endpoint.draining,
        "in_flight": endpoint.in_flight,
        "weight": endpoint.spec.weight,
        "last_error": endpoint.last_error,
        "latency": {"requests": int(count), "mean_s": round(mean, 6)},
        "prefix_index_blocks": prefix_store.size(endpoint.name) if prefix_store is not None else None,
        "engine": _engine(request, endpoint.name) if request is not None else None,
        "kv_events": _kv_events(request, endpoint) if request is not None else None,
    }


def _kv_events(request: Request, endpoint: Any) -> dict[str, Any] | None:
    """Precise mode's view of the endpoint (None when it is off): its configured ``kv_events``
    address (connect mode) or None (its batches can come through the bind only), what that socket
    is doing (``state``: connecting, connected, retrying, disconnected, refused, stopped; ``error``:
    the last problem, or None; ``scheduling/kv_link.py``), whether any batch came, whether its
    block set is complete (else precise decisions fall back), its blocks and block size (tokens)."""
    routing = getattr(request.app.state, "routing", None)
    sets = getattr(routing, "kv", None)
    if sets is None or getattr(routing, "kv_subscriber", None) is None:
        return None
    name = endpoint.name
    link = routing.kv_connections.link(name) if routing.kv_connections is not None else None
    address = endpoint.spec.kv_events
    if link is None or link["address"] != address:  # not (yet) subscribed to the configured address
        link = {"address": address, "state": "connecting" if address else None, "error": None}
    return {**link, "publishing": sets.known(name), "complete": sets.complete(name),
            "blocks": sets.size(name), "block_size": sets.block_size(name)}


class EndpointCreate(StrictNumbers):
    """An endpoint to add at run time (kept in the state store, so every replica gets it)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", description="Unique endpoint name.")
    cluster: str = Field(min_length=1, description="An existing cluster.")
    url: str = Field(min_length=1, max_length=2048, description="OpenAI base URL, e.g. http://10.0.0.5:8000/v1.")
    model: str = Field(min_length=1, max_length=256, description="The model name the endpoint serves.")
    weight: float = Field(1.0, gt=0, le=1000, description="Relative capacity.")
    health_url: str | None = Field(None, max_length=2048, description="Default: the URL's origin + /health.")


class EndpointPatch(StrictNumbers):
    model_config = ConfigDict(extra="forbid")

    weight: float | None = Field(None, gt=0, le=1000, description="New relative capacity.")
    draining: bool | None = Field(None, description="True: no new requests; in-flight ones finish.")


def _config_names(settings: Any) -> set[str]:
    return {settings.endpoint_name(c, i) for c, cluster in settings.clusters.items() for i in range(len(cluster.endpoints))}


def _find(container: Any, name: str) -> Any:
    endpoint = container.registry.find(name)
    if endpoint is None:
        raise NotFoundError(f"No endpoint named '{name}'.", param="name")
    return endpoint


@router.get("/endpoints", summary="List endpoints with their live state")
async def list_endpoints(request: Request) -> dict[str, Any]:
    container = request.app.state.container
    latencies = _latencies(container)
    store = _prefix_store(request)
    return {"data": [endpoint_view(endpoint, latencies, store, request) for endpoint in container.registry]}


@router.get("/endpoints/{name}", summary="Inspect one endpoint", responses={404: {"description": "No such endpoint"}})
async def get_endpoint(request: Request, name: str) -> dict[str, Any]:
    container = request.app.state.container
    return endpoint_view(_find(container, name), _latencies(container), _prefix_store(request), request)


@router.post(
    "/endpoints",
    status_code=201,
    summary="Add an endpoint (URL must resolve inside admin.allowed_networks)",
    responses={400: {"description": "Invalid or disallowed URL"}, 409: {"description": "Name in use"}},
)
async def add_endpoint(request: Request, body: EndpointCreate) -> dict[str, Any]:
    container = request.app.state.container
    runtime = container.ops.runtime
    if body.cluster not in runtime.settings.clusters:
        raise InvalidRequestError(f"Unknown cluster '{body.cluster}'.", param="cluster")
    if container.registry.find(body.name) is not None or body.name in _config_names(runtime.settings):
        raise ConflictError(f"An endpoint named '{body.name}' exists (or is a removed config endpoint: reset it).", param="name")
    networks = parse_networks(runtime.settings.admin.allowed_networks)
    server = runtime.settings.server
    listeners = [(server.host, server.port)]
    if request.scope.get("server"):
        listeners.append(tuple(request.scope["server"]))  # the address this admin request came in on
    await check_url(body.url, networks, container.ops.resolver, "url", listeners)
    if body.health_url:
        await check_url(body.health_url, networks, container.ops.resolver, "health_url", listeners)
    spec = body.model_dump()
    spec["url"] = body.url.rstrip("/")
    await runtime.write("endpoints", body.name, {"spec": spec})
    return endpoint_view(_find(container, body.name), {}, _prefix_store(request))


@router.delete(
    "/endpoints/{name}",
    summary="Remove an endpoint (in-flight requests finish)",
    responses={404: _NO_ENDPOINT, 409: {"description": "A managed worker"}},
)
async def remove_endpoint(request: Request, name: str) -> dict[str, Any]:
    container = request.app.state.container
    endpoint = _find(container, name)
    if endpoint.source not in ("config", "admin"):
        raise ConflictError(f"Endpoint '{name}' is a {endpoint.source} worker; stop it through its supervisor.")
    runtime = container.ops.runtime
    doc = runtime.endpoint_doc(name)
    if endpoint.source == "admin":
        await runtime.write("endpoints", name, None)
    else:
        await runtime.write("endpoints", name, {**doc, "removed": True})
    return {"name": name, "deleted": True, "in_flight": endpoint.in_flight}


async def _patch(request: Request, name: str, changes: dict[str, Any]) -> dict[str, Any]:
    container = request.app.state.container
    _find(container, name)
    runtime = container.ops.runtime
    await runtime.write("endpoints", name, {**runtime.endpoint_doc(name), **changes})
    return endpoint_view(_find(container, name), _latencies(container), _prefix_store(request), request)


@router.patch("/endpoints/{name}", summary="Change an endpoint's weight or draining flag", responses={404: _NO_ENDPOINT})
async def patch_endpoint(request: Request, name: str, body: EndpointPatch) -> dict[str, Any]:
    changes = body.model_dump(exclude_none=True)
    return await _patch(request, name, changes)


@router.post("/endpoints/{name}/drain", summary="Drain: no new requests; in-flight ones finish", responses={404: _NO_ENDPOINT})
async def drain_endpoint(request: Request, name: str) -> dict[str, Any]:
    return await _patch(request, name, {"draining": True})


@router.post("/endpoints/{name}/undrain", summary="Take new requests again", responses={404: {"description": "No such endpoint"}})
async def undrain_endpoint(request: Request, name: str) -> dict[str, Any]:
    return await _patch(request, name, {"draining": False})


@router.post(
    "/endpoints/{name}/reset",
    summary="Drop every admin change to a config endpoint (re-adds it if removed)",
    responses={404: {"description": "Not an endpoint of the config file"}},
)
async def reset_endpoint(request: Request, name: str) -> dict[str, Any]:
    container = request.app.state.container
    runtime = container.ops.runtime
    settings = runtime.settings
    if name not in _config_names(settings):
        raise NotFoundError(f"No endpoint named '{name}' in the config file.", param="name")
    await runtime.write("endpoints", name, None)
    return endpoint_view(_find(container, name), _latencies(container), _prefix_store(request))
