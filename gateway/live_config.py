"""The configuration in force on one replica: the config file plus the admin API's overlay.

Two inputs decide what the gateway routes to, what it charges and whom it admits:

* the **config file** (``kvgate serve --config FILE``), re-read by :meth:`Runtime.reload`;
* the **admin overlay** in the state store (``gateway/state/admin_sync.py``): endpoints added,
  removed, re-weighted or drained, cluster prices, and API keys made through the admin API.

:meth:`Runtime.apply` folds both into the live objects (endpoint registry, model catalog, prices,
key table). It is idempotent and runs without awaiting, so a request sees the old or the new
configuration, never a mix. Endpoints whose target (cluster, URL, served model) is unchanged keep
their live state (in-flight count, health, circuit breaker); removed endpoints leave the registry
but the requests already using them finish. Managed workers (``source = "managed"``) belong to
the worker supervisor: the overlay only re-weights or drains them.

Admin writes go to the store first and are then applied here from a fresh snapshot, so the
replica that took the change and every other replica converge on the same state.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.config.server import CONNECTION_LIMITS
from gateway.endpoints.model import Endpoint, EndpointSpec
from gateway.endpoints.registry import EndpointRegistry, new_endpoint
from gateway.keys.model import config_keys, records_from
from gateway.keys.pricing import Price, Pricing
from gateway.keys.table import KeyTable
from gateway.selection.catalog import ModelCatalog
from gateway.config import ConfigError, Settings, load_settings
from gateway.state.admin_sync import AdminStore, AdminSync, Snapshot

log = logging.getLogger("kvgate.runtime")

# Sections a reload cannot change in a running process (they shape listeners, pools and loops).
RESTART_ONLY = ("server", "upstream", "routing", "state", "tracing", "logging", "metrics")


def _needs_restart(name: str, new: Any, old: Any) -> bool:
    """Whether section ``name`` changed in a way only a restart applies (``[server]``'s connection
    limits are live: ``gateway.config.server.CONNECTION_LIMITS``)."""
    if name != "server":
        return bool(new != old)
    return any(getattr(new, key) != getattr(old, key) for key in type(new).model_fields if key not in CONNECTION_LIMITS)


@dataclass
class ReloadResult:
    """Outcome of a reload: ``errors`` (one line each) when rejected; else the restart-only changes."""

    ok: bool
    errors: list[str] = field(default_factory=list)
    restart_required: list[str] = field(default_factory=list)


def _same_target(a: EndpointSpec, b: EndpointSpec) -> bool:
    return (a.cluster, a.base_url, a.served_model) == (b.cluster, b.base_url, b.served_model)


class Runtime:
    """Owns the live configuration objects of one replica (built by ``create_app``)."""

    def __init__(
        self,
        *,
        settings: Settings,
        config_path: str | Path | None,
        registry: EndpointRegistry,
        catalog: ModelCatalog,
        pricing: Pricing,
        keys: KeyTable,
        store: AdminStore,
        on_settings: Callable[[Settings], None],
        clock: Callable[[], float] = time.monotonic,
        errors: Callable[[str], None] = lambda operation: None,
    ) -> None:
        self.settings = settings
        self.config_path = config_path
        self.registry = registry
        self.catalog = catalog
        self.pricing = pricing
        self.keys = keys
        self.store = store
        self.replica = uuid.uuid4().hex[:12]
        self._on_settings = on_settings
        self._clock = clock
        self.overlay: Snapshot = {"endpoints": {}, "clusters": {}, "keys": {}, "control": {}}
        self._reload_seen: int | None = None
        self.sync = AdminSync(store, self.apply, settings.admin.sync_interval_s, errors=errors)

    # -- applying ---------------------------------------------------------------------------

    async def apply(self, snapshot: Snapshot) -> None:
        """Fold an admin snapshot into the live objects; reload if another replica asked to."""
        self.overlay = snapshot
        self._apply_now(self.settings, snapshot)
        reload = snapshot.get("control", {}).get("reload") or {}
        generation = int(reload.get("generation", 0))
        if self._reload_seen is None or reload.get("by") == self.replica:
            self._reload_seen = generation
        elif generation != self._reload_seen:
            self._reload_seen = generation
            result = await self.reload(broadcast=False)
            if not result.ok:
                log.error("reload asked by replica %s failed here: %s", reload.get("by"), "; ".join(result.errors))

    def _apply_now(self, settings: Settings, snapshot: Snapshot) -> None:
        stored = records_from(snapshot["keys"].values())
        self.keys.replace(config=config_keys(settings.auth), stored=stored, required=settings.auth.required)
        overrides = {
            name: Price(**doc["price"]) for name, doc in snapshot["clusters"].items() if isinstance(doc.get("price"), dict)
        }
        self.pricing.replace(Pricing.from_settings(settings.clusters, overrides))
        self._reconcile(settings, snapshot["endpoints"])

    def _admin_endpoint(self, settings: Settings, spec: dict[str, Any]) -> Endpoint:
        return new_endpoint(
            EndpointSpec(
                name=spec["name"],
                cluster=spec["cluster"],
                base_url=spec["url"],
                served_model=spec["model"],
                health_url=spec.get("health_url"),
                weight=float(spec.get("weight") or 1.0),
            ),
            settings.health,
            settings.circuit,
            clock=self._clock,
            source="admin",
        )

    def _desired(self, settings: Settings, overlay: dict[str, dict[str, Any]]) -> dict[str, Endpoint]:
        desired = {endpoint.name: endpoint for endpoint in EndpointRegistry.from_settings(settings.clusters, settings.health, settings.circuit, clock=self._clock)}
        for name, doc in overlay.items():
            spec = doc.get("spec")
            if isinstance(spec, dict) and name not in desired and spec.get("cluster") in settings.clusters:
                desired[name] = self._admin_endpoint(settings, spec)
            if doc.get("removed"):
                desired.pop(name, None)
        return desired

    def _reconcile(self, settings: Settings, overlay: dict[str, dict[str, Any]]) -> None:
        desired = self._desired(settings, overlay)
        for endpoint in list(self.registry):
            if endpoint.source not in ("config", "admin"):
                continue
            want = desired.get(endpoint.name)
            if want is None or want.source != endpoint.source or not _same_target(endpoint.spec, want.spec):
                self.registry.remove(endpoint.name)
        for name, want in desired.items():
            endpoint = self.registry.find(name)
            if endpoint is None:
                self.registry.add(want)
                endpoint = want
            weight = overlay.get(name, {}).get("weight")
            spec = dataclasses.replace(want.spec, weight=float(weight)) if weight else want.spec
            if endpoint.spec != spec:
                endpoint.spec = spec
            endpoint.draining = bool(overlay.get(name, {}).get("draining"))
        for endpoint in self.registry:
            doc = overlay.get(endpoint.name)
            if endpoint.source not in ("config", "admin") and doc:
                if doc.get("weight"):
                    endpoint.spec = dataclasses.replace(endpoint.spec, weight=float(doc["weight"]))
                if "draining" in doc:
                    endpoint.draining = bool(doc["draining"])

    # -- admin writes -----------------------------------------------------------------------

    async def write(self, section: str, name: str, document: dict[str, Any] | None) -> None:
        """Store one admin document (None deletes it) and apply the resulting state here now.

        Raises:
            StateStoreError: (503) the store failed; nothing changed.
        """
        if document is None:
            await self.store.delete(section, name)
        else:
            await self.store.put(section, name, document)
        await self.sync.poll()

    def endpoint_doc(self, name: str) -> dict[str, Any]:
        return dict(self.overlay["endpoints"].get(name) or {})

    # -- reload -----------------------------------------------------------------------------

    async def reload(self, *, broadcast: bool = True) -> ReloadResult:
        """Re-read the config file; swap it in whole, or keep the old one and say why not."""
        if self.config_path is None:
            return ReloadResult(False, ["no config file: the gateway was started without --config"])
        try:
            new = await asyncio.to_thread(load_settings, self.config_path)
            EndpointRegistry.from_settings(new.clusters, new.health, new.circuit)  # api_key_env variables must exist
        except ConfigError as error:
            lines = str(error).splitlines()
            return ReloadResult(False, [line.strip() for line in lines[1:]] or lines)
        changed = [name for name in RESTART_ONLY if _needs_restart(name, getattr(new, name), getattr(self.settings, name))]
        if new.admission.enabled and not self.settings.admission.enabled:  # its gate is built at start
            changed.append("admission.enabled")
        self.catalog.replace(ModelCatalog.from_settings(new))
        self._apply_now(new, self.overlay)
        self.settings = new
        self._on_settings(new)
        log.info("configuration reloaded from %s", self.config_path)
        if broadcast:
            generation = int((self.overlay["control"].get("reload") or {}).get("generation", 0)) + 1
            await self.write("control", "reload", {"generation": generation, "by": self.replica})
        return ReloadResult(True, restart_required=changed)

