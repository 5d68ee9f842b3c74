"""The operator's console and the per-request record under ``/admin``.

Routes:
    ``GET /admin/console``, ``/admin/console/{console.js,charts.js,console.css}``: the
        console, one static page served from the package (``gateway/api/console/``; no CDN, no
        build step). The page itself holds no data and no secret, so it is served without the
        admin key (a browser cannot send a bearer header when it navigates), but only while the
        admin API is on (404 otherwise). It asks for the admin key once, keeps it in the tab's
        ``sessionStorage`` and sends it as ``Authorization: Bearer`` on every data call, which
        reads only the admin API and ``/metrics``; a call without the key gets 401 and the page
        says so. Every console response carries a Content-Security-Policy without inline scripts
        or styles (``script-src 'self'; style-src 'self'``), ``frame-ancestors 'none'``,
        ``X-Frame-Options: DENY``, ``X-Content-Type-Options: nosniff``, ``Referrer-Policy:
        no-referrer`` and ``Cache-Control: no-store``.
    ``GET /admin/requests?limit=N`` (admin key): the newest N (1..1000, default 100) records of
        this replica's ring (``observability/request_log.py``), newest first, and ``replica``:
        which process answered (each replica keeps its own ring).
    ``GET /admin/requests/{id}`` (admin key): one record (the newest with that request id) with
        ``explanation``: its recorded scheduling decision in the shape of
        ``POST /admin/routing/explain`` (per-endpoint, per-scorer scores, weighted totals,
        filters, predicted cached tokens, engine stats as they were) and its route selection;
        404 when this replica does not hold it (another replica may).
"""

from __future__ import annotations

import dataclasses
from importlib import resources
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response

from gateway.api.admin import require_admin
from gateway.errors import NotFoundError
from gateway.observability.request_log import replica_identity

_SECURITY_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
_ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "charts.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}
_MAX_LIMIT = 1000


def _asset(name: str) -> bytes:
    return resources.files("gateway.api").joinpath("console", name).read_bytes()


def _admin_on(request: Request) -> None:
    """404 while the admin API is off (no ``admin.api_key``), as every admin route."""
    configured = request.app.state.container.settings.admin.api_key
    if configured is None or not configured.get_secret_value():
        raise NotFoundError("The admin API is disabled: set admin.api_key (KVGATE__ADMIN__API_KEY).")


console = APIRouter(prefix="/admin/console", tags=["admin"], dependencies=[Depends(_admin_on)], include_in_schema=False)
router = APIRouter(
    prefix="/admin",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses={401: {"description": "Missing or wrong admin key"}, 404: {"description": "Admin API disabled or not found"}},
)


def _serve(name: str) -> Response:
    return Response(_asset(name), media_type=_ASSETS[name], headers=_SECURITY_HEADERS)


@console.get("")
@console.head("", include_in_schema=False)
async def console_page() -> Response:
    return _serve("index.html")


@console.get("/console.js")
async def console_script() -> Response:
    return _serve("console.js")


@console.get("/charts.js")
async def console_charts() -> Response:
    return _serve("charts.js")


@console.get("/console.css")
async def console_style() -> Response:
    return _serve("console.css")


@router.get("/requests", summary="This replica's most recent requests, newest first")
async def list_requests(request: Request, limit: int = Query(100, ge=1, le=_MAX_LIMIT)) -> dict[str, Any]:
    log = request.app.state.container.ops.requests
    return {"replica": replica_identity(), "size": log.size, "held": len(log), "data": log.recent(limit)}


@router.get("/requests/{request_id}", summary="One recent request with its scheduling explanation",
            responses={404: {"description": "Not in this replica's record"}})
async def get_request(request: Request, request_id: str) -> dict[str, Any]:
    found = request.app.state.container.ops.requests.find(request_id)
    if found is None:
        raise NotFoundError(f"Request '{request_id}' is not in this replica's record (another replica may hold it).",
                            param="id")
    record, decision, selection = found
    return {
        "replica": replica_identity(),
        **record,
        "explanation": None if decision is None else decision.render(),
        "route_selection": None if selection is None else dataclasses.asdict(selection),
    }
