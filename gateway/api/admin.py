"""The admin REST API under ``/admin``: guarded by the admin key, never by a client key.

``Authorization: Bearer ADMIN_KEY`` is compared in constant time (``hmac.compare_digest``).
Without ``admin.api_key`` configured, every ``/admin`` route answers 404 (the API is off).
A missing or wrong key gets 401; a client key is just a wrong key here.

Routes (more are added by feature routers that depend on :func:`require_admin`):
    ``GET /admin/endpoints``: every endpoint with its cluster, URL, health, draining flag,
    in-flight count, weight and last error.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, Depends, Request

from gateway.errors import AuthenticationError, NotFoundError

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


@router.get("/endpoints", summary="List endpoints with their live state")
async def list_endpoints(request: Request) -> dict[str, Any]:
    registry = request.app.state.container.registry
    return {
        "data": [
            {
                "name": endpoint.name,
                "cluster": endpoint.spec.cluster,
                "url": endpoint.spec.base_url,
                "model": endpoint.spec.served_model,
                "health": endpoint.health.value,
                "draining": endpoint.draining,
                "in_flight": endpoint.in_flight,
                "weight": endpoint.spec.weight,
                "last_error": endpoint.last_error,
            }
            for endpoint in registry
        ]
    }
