"""Liveness, readiness and Prometheus metrics.

``GET /health``: 200 while the process serves HTTP (liveness).
``GET /ready``: 200 when at least one endpoint's last check or request succeeded, else 503 with
an OpenAI-shaped error (readiness: keep traffic away until something can answer).
``GET /metrics``: Prometheus text exposition of the app's registry (of every process under
``kvgate serve --processes N``).
"""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from gateway.errors import NoHealthyEndpointError, NotFoundError

router = APIRouter()


@router.get("/health", summary="Liveness")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.head("/health", include_in_schema=False)  # load balancers probe with HEAD: 200, no body
async def health_head() -> Response:
    return Response(status_code=200)


@router.get("/ready", summary="Readiness: at least one healthy endpoint",
            responses={503: {"description": "No healthy endpoint"}})
async def ready(request: Request) -> dict[str, object]:
    healthy = request.app.state.container.registry.healthy_count()
    if healthy == 0:
        raise NoHealthyEndpointError("No endpoint has passed a health check yet.")
    return {"status": "ready", "healthy_endpoints": healthy}


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(request: Request) -> Response:
    container = request.app.state.container
    if not container.settings.metrics.enabled:
        raise NotFoundError("Metrics are disabled (metrics.enabled = false).")
    return Response(container.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


# HEAD wherever GET is (the same status, no body); out of the OpenAPI document, where a second
# operation of the same function would repeat its operation id.
router.add_api_route("/ready", ready, methods=["HEAD"], include_in_schema=False)
router.add_api_route("/metrics", metrics, methods=["HEAD"], include_in_schema=False, response_class=Response)
