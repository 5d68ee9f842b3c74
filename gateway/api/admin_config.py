"""Admin routes for clusters, routes, config reload and request statistics (admin key only).

    ``GET /admin/clusters[/NAME]``: clusters with their effective prices (USD per 1M tokens),
        endpoints, healthy and in-flight counts.
    ``PATCH /admin/clusters/NAME``: change prices (``price``) and endpoint weights (``weights``,
        endpoint name -> weight); kept in the state store, so every replica applies them.
    ``GET /admin/routes``: every public model name and alias with the clusters its route walks.
    ``POST /admin/reload``: re-read the config file. A file that fails validation is rejected
        with 400 ``invalid_config`` listing every error, and the old configuration stays; a valid
        one is swapped in at once without dropping requests in flight, and every other replica
        re-reads its own file. Sections that need a restart are listed in ``restart_required``.
    ``GET /admin/stats``: requests, errors, latency, tokens and cost per model, cluster and
        endpoint, from this replica's metrics; ``loop_lag`` (ms: max and p99 over the recent window, max since
        start) when the event-loop lag monitor runs ([metrics] loop_lag_interval_s).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import ConfigDict, Field

from gateway.api.admin import require_admin
from gateway.config import StrictNumbers
from gateway.endpoints.model import Health
from gateway.errors import InvalidRequestError, NotFoundError
from gateway.observability.stats import compute_stats

router = APIRouter(
    prefix="/admin",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses={401: {"description": "Missing or wrong admin key"}, 404: {"description": "Admin API disabled or not found"}},
)


class PriceBody(StrictNumbers):
    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(ge=0, le=1e6, description="USD per 1M uncached input tokens.")
    cached_input_per_mtok: float | None = Field(None, ge=0, le=1e6, description="Default: input_per_mtok.")
    output_per_mtok: float = Field(ge=0, le=1e6, description="USD per 1M output tokens.")


class ClusterPatch(StrictNumbers):
    model_config = ConfigDict(extra="forbid")

    price: PriceBody | None = None
    weights: dict[str, float] | None = Field(None, description="Endpoint name -> new weight (> 0).")


def _cluster_view(container: Any, name: str) -> dict[str, Any]:
    endpoints = container.registry.cluster(name)
    settings = container.ops.runtime.settings.clusters[name]
    return {
        "name": name,
        "description": settings.description,
        "price": container.ops.pricing.get(name).to_dict(),
        "endpoints": [endpoint.name for endpoint in endpoints],
        "healthy": sum(1 for e in endpoints if e.health is Health.HEALTHY and not e.draining),
        "in_flight": sum(e.in_flight for e in endpoints),
    }


def _known(container: Any, name: str) -> None:
    if name not in container.ops.runtime.settings.clusters:
        raise NotFoundError(f"No cluster named '{name}'.", param="name")


@router.get("/clusters", summary="List clusters with prices and endpoints")
async def list_clusters(request: Request) -> dict[str, Any]:
    container = request.app.state.container
    return {"data": [_cluster_view(container, name) for name in container.ops.runtime.settings.clusters]}


@router.get("/clusters/{name}", summary="Inspect one cluster")
async def get_cluster(request: Request, name: str) -> dict[str, Any]:
    container = request.app.state.container
    _known(container, name)
    return _cluster_view(container, name)


@router.patch(
    "/clusters/{name}",
    summary="Change a cluster's prices and its endpoints' weights",
    responses={400: {"description": "Bad weights"}},
)
async def patch_cluster(request: Request, name: str, body: ClusterPatch) -> dict[str, Any]:
    container = request.app.state.container
    _known(container, name)
    runtime = container.ops.runtime
    members = {endpoint.name for endpoint in container.registry.cluster(name)}
    for endpoint, weight in (body.weights or {}).items():
        if endpoint not in members:
            raise InvalidRequestError(f"Endpoint '{endpoint}' is not in cluster '{name}'.", param="weights")
        if not 0 < weight <= 1000:
            raise InvalidRequestError("Weights must be in (0, 1000].", param="weights")
    if body.price is not None:
        price = body.price.model_dump()
        if price["cached_input_per_mtok"] is None:
            price["cached_input_per_mtok"] = price["input_per_mtok"]
        await runtime.write("clusters", name, {"price": price})
    for endpoint, weight in (body.weights or {}).items():
        await runtime.write("endpoints", endpoint, {**runtime.endpoint_doc(endpoint), "weight": weight})
    return _cluster_view(container, name)


@router.get("/routes", summary="Public models and aliases with their routes")
async def list_routes(request: Request) -> dict[str, Any]:
    catalog = request.app.state.container.catalog
    models = [
        {"id": entry.id, "alias_of": entry.alias_of, "route": entry.route.name, "clusters": list(entry.route.clusters)}
        for entry in catalog.entries()
    ]
    routes = [{"name": route.name, "clusters": list(route.clusters)} for route in catalog.routes.values()]
    return {"models": models, "routes": routes}


@router.post(
    "/reload",
    summary="Re-read the config file atomically",
    responses={400: {"description": "The file is invalid; the old configuration stays"}},
)
async def reload(request: Request) -> dict[str, Any]:
    result = await request.app.state.container.ops.runtime.reload()
    if not result.ok:
        raise InvalidRequestError("The configuration was not reloaded:\n" + "\n".join(result.errors), code="invalid_config")
    return {"reloaded": True, "restart_required": result.restart_required}


@router.get("/stats", summary="Requests, errors, latency, tokens and cost per model, cluster and endpoint")
async def stats(request: Request) -> dict[str, Any]:
    container = request.app.state.container
    tables = compute_stats(container.metrics.registry.collect())
    monitor = container.loop_lag
    if monitor is not None:  # [metrics] loop_lag_interval_s: this process's event loop, ms
        lag = monitor.snapshot()
        tables["loop_lag"] = {
            "max_ms": round(lag.max_s * 1e3, 3), "p99_ms": round(lag.p99_s * 1e3, 3),
            "max_since_start_ms": round(lag.max_since_start_s * 1e3, 3), "samples": lag.samples,
        }
    return tables
