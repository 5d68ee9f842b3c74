"""Admin routes for client API keys (admin key only).

    ``POST /admin/keys``: create a key with optional limits (allowed models, RPM, TPM, spend
        budget per period). The answer holds the secret (``key``) once; only its SHA-256 digest
        and first 12 characters are stored.
    ``GET /admin/keys``: every key (config and admin) by id, prefix, name, limits; never secrets.
    ``GET /admin/keys/ID``: one key and its spend in the current budget period.
    ``DELETE /admin/keys/ID``: revoke (admin keys; config keys are removed from the file).
    ``GET /admin/keys/ID/usage?days=N``: usage records per UTC day, model and cluster
        (requests, errors, input, cached and output tokens, cost), today and the N-1 days before.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from pydantic import ConfigDict, Field

from gateway.api.admin import require_admin
from gateway.config import StrictNumbers
from gateway.errors import ConflictError, NotFoundError
from gateway.keys.model import KeyLimits, KeyRecord, new_key
from gateway.keys.quota_store import day_of

router = APIRouter(
    prefix="/admin",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses={401: {"description": "Missing or wrong admin key"}, 404: {"description": "Admin API disabled or not found"}},
)


class KeyCreate(StrictNumbers):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128, description="A label for people.")
    models: list[str] | None = Field(None, max_length=1000, description="Public models this key may use; null: all.")
    rpm: int | None = Field(None, ge=1, le=10**9, description="Requests per minute: at most this many in any 60 s up to 1,000 (a sliding log); above, "
                               "a sliding-window counter, which a burst across a minute boundary can exceed by up to ~2x.")
    tpm: int | None = Field(None, ge=1, le=10**12, description="Tokens per minute (input + output).")
    budget_usd: float | None = Field(None, gt=0, le=10**9, description="Spend allowed per budget_period, USD.")
    budget_period: Literal["hour", "day", "week", "month"] = "month"


def _find(request: Request, key_id: str) -> KeyRecord:
    record = request.app.state.container.ops.gate.table.get(key_id)
    if record is None:
        raise NotFoundError(f"No key with id '{key_id}'.", param="id")
    return record


@router.post("/keys", status_code=201, summary="Create an API key (the secret is shown once)")
async def create_key(request: Request, body: KeyCreate) -> dict[str, Any]:
    container = request.app.state.container
    limits = KeyLimits(
        models=frozenset(body.models) if body.models is not None else None,
        rpm=body.rpm,
        tpm=body.tpm,
        budget_usd=body.budget_usd,
        budget_period=body.budget_period,
    )
    secret, record = new_key(body.name, limits, container.ops.gate.now())
    await container.ops.runtime.write("keys", record.id, record.to_dict())
    return {**record.public(), "key": secret}


@router.get("/keys", summary="List API keys (prefix and metadata, never secrets)")
async def list_keys(request: Request) -> dict[str, Any]:
    return {"data": [record.public() for record in request.app.state.container.ops.gate.table.records()]}


@router.get("/keys/{key_id}", summary="Inspect one key and its spend this period")
async def get_key(request: Request, key_id: str) -> dict[str, Any]:
    record = _find(request, key_id)
    container = request.app.state.container
    spent = await container.ops.gate.store.spent(record.id, record.limits, container.ops.gate.now())
    return {**record.public(), "spent_usd_this_period": spent / 1_000_000}


@router.delete("/keys/{key_id}", summary="Revoke a key", responses={409: {"description": "A config-file key"}})
async def revoke_key(request: Request, key_id: str) -> dict[str, Any]:
    record = _find(request, key_id)
    if record.source != "admin":
        raise ConflictError(f"Key '{key_id}' comes from the config file; remove it there and reload.")
    revoked = dataclasses.replace(record, revoked=True)
    await request.app.state.container.ops.runtime.write("keys", record.id, revoked.to_dict())
    return revoked.public()


@router.get("/keys/{key_id}/usage", summary="Usage records per day, model and cluster")
async def key_usage(request: Request, key_id: str, days: int = Query(1, ge=1, le=90)) -> dict[str, Any]:
    record = _find(request, key_id)
    now = request.app.state.container.ops.gate.now()
    wanted = [day_of(now - 86400 * back) for back in range(days)]
    rows = await request.app.state.container.ops.gate.store.usage(record.id, wanted)
    return {"id": record.id, "data": rows}
