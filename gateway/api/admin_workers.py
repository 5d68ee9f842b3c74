"""The admin API of managed vLLM workers, under ``/admin/workers`` (admin key required).

Present when the gateway runs a worker supervisor (``kvgate up``; ``Container.supervisor``);
otherwise every route answers 404 (no managed workers). Routes:

    ``GET /admin/workers``: every worker with its lifecycle phase, URL, pid, restarts, last
    error, KV capacity (planned beside reported, with their relative error), the KV and model
    dtypes in force (``kv_cache_dtype``, ``dtype``) with why (``dtype_reason``, from
    ``backends.host``) and, when it is in the registry, its endpoint's health, draining flag
    and in-flight count.
    ``GET /admin/workers/{name}``: one worker, same shape.
    ``GET /admin/workers/{name}/log?lines=N``: the last N lines (1..500, default 50; at most
    the file's last 64 KiB) of the worker's log file, and its path.
    ``POST /admin/workers/{name}/restart``: drain (bounded), stop, relaunch; 202 at once.
    ``POST /admin/workers/{name}/drain``: drain and stop; it stays stopped; 202 at once.
    ``POST /admin/workers/{name}/start``: start a stopped or failed worker; 202 at once.

A 202 body is the worker's status when the request was accepted; follow its progress with GET.
Unknown workers get 404.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response

from gateway.api.admin import require_admin
from gateway.errors import NotFoundError

_TAIL_BYTES = 64 * 1024
_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing or wrong admin key"},
    404: {"description": "Admin API disabled, no managed workers, or no such worker"},
}
router = APIRouter(prefix="/admin/workers", tags=["admin"], dependencies=[Depends(require_admin)],
                   responses=_RESPONSES)


def _supervisor(request: Request) -> Any:
    supervisor = getattr(request.app.state.container, "supervisor", None)
    if supervisor is None:
        raise NotFoundError("No managed workers: this gateway runs no worker supervisor (see `kvgate up`).")
    return supervisor


def _row(request: Request, status: Any) -> dict[str, Any]:
    row = status.to_dict()
    endpoint = request.app.state.container.registry.find(status.name)
    row["endpoint"] = None if endpoint is None else {
        "cluster": endpoint.spec.cluster, "health": endpoint.health.value,
        "draining": endpoint.draining, "in_flight": endpoint.in_flight,
    }
    return row


def _supervisor_of(request: Request, name: str) -> Any:
    supervisor = _supervisor(request)
    if name not in supervisor.names():
        raise NotFoundError(f"No managed worker named `{name}`.")
    return supervisor


def _accepted(request: Request, status: Any) -> Response:
    return request.app.state.container.json(_row(request, status), status=202)


@router.get("", summary="List managed workers")
async def list_workers(request: Request) -> dict[str, Any]:
    return {"data": [_row(request, status) for status in _supervisor(request).statuses()]}


@router.get("/{name}", summary="One managed worker")
async def get_worker(request: Request, name: str) -> dict[str, Any]:
    return _row(request, _supervisor_of(request, name).status(name))


def _tail(path: str, lines: int) -> list[str]:
    """The last ``lines`` lines of the file's last :data:`_TAIL_BYTES` bytes ([] when unreadable)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(size - _TAIL_BYTES, 0))
            data = f.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-lines:]


@router.get("/{name}/log", summary="The last lines of a worker's log")
async def worker_log(request: Request, name: str, lines: int = Query(50, ge=1, le=500)) -> dict[str, Any]:
    status = _supervisor_of(request, name).status(name)
    path = status.log_path
    return {"name": name, "path": path, "lines": [] if path is None else _tail(path, lines)}


@router.post("/{name}/restart", status_code=202, summary="Drain, stop and relaunch a worker")
async def restart_worker(request: Request, name: str) -> Response:
    return _accepted(request, _supervisor_of(request, name).restart(name))


@router.post("/{name}/drain", status_code=202, summary="Drain and stop a worker")
async def drain_worker(request: Request, name: str) -> Response:
    return _accepted(request, _supervisor_of(request, name).drain(name))


@router.post("/{name}/start", status_code=202, summary="Start a stopped or failed worker")
async def start_worker(request: Request, name: str) -> Response:
    return _accepted(request, _supervisor_of(request, name).start_worker(name))
