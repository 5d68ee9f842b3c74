"""The runtime configuration: admin overlay folded into the registry, prices and keys; reload."""

from __future__ import annotations

from pathlib import Path

from gateway.endpoints.model import Endpoint, EndpointSpec
from gateway.endpoints.registry import EndpointRegistry
from gateway.keys.model import KeyLimits, new_key
from gateway.keys.pricing import Price, Pricing
from gateway.keys.table import KeyTable
from gateway.selection.catalog import ModelCatalog
from gateway.live_config import Runtime
from gateway.config import Settings, build_settings
from gateway.state.admin_sync import MemoryAdminStore
from tests.support.ops import toml_config

DATA = {
    "clusters": {
        "fast": {"endpoints": [{"name": "a", "url": "http://127.0.0.1:8001/v1", "model": "m"}], "price": {"input_per_mtok": 1}},
        "slow": {"endpoints": [{"name": "b", "url": "http://127.0.0.1:8002/v1", "model": "m"}]},
    },
    "models": {"m": {"cluster": "fast"}},
}


def _runtime(settings: Settings, config_path: Path | None = None) -> tuple[Runtime, list[Settings]]:
    swapped: list[Settings] = []
    runtime = Runtime(
        settings=settings,
        config_path=config_path,
        registry=EndpointRegistry.from_settings(settings.clusters, settings.health, settings.circuit),
        catalog=ModelCatalog.from_settings(settings),
        pricing=Pricing.from_settings(settings.clusters),
        keys=KeyTable(),
        store=MemoryAdminStore(),
        on_settings=swapped.append,
    )
    return runtime, swapped


def _names(runtime: Runtime) -> list[str]:
    return sorted(endpoint.name for endpoint in runtime.registry)


async def test_overlay_adds_reweights_drains_and_removes() -> None:
    runtime, _ = _runtime(build_settings(DATA))
    original = runtime.registry.find("a")
    spec = {"name": "c", "cluster": "slow", "url": "http://127.0.0.1:8003/v1", "model": "m", "weight": 2.0}
    await runtime.write("endpoints", "c", {"spec": spec})
    await runtime.write("endpoints", "a", {"weight": 4.0, "draining": True})
    await runtime.write("endpoints", "b", {"removed": True})
    assert _names(runtime) == ["a", "c"]
    a = runtime.registry.find("a")
    assert a is original and a.spec.weight == 4.0 and a.draining  # live state kept
    assert runtime.registry.find("c").source == "admin"
    await runtime.write("endpoints", "b", None)
    await runtime.write("endpoints", "a", None)
    assert _names(runtime) == ["a", "b", "c"] and not a.draining and a.spec.weight == 1.0


async def test_managed_endpoints_are_only_reweighted_or_drained() -> None:
    runtime, _ = _runtime(build_settings(DATA))
    worker = Endpoint(EndpointSpec("w", "fast", "http://127.0.0.1:8009/v1", "m"), source="managed")
    runtime.registry.add(worker)
    await runtime.write("endpoints", "w", {"weight": 3.0, "draining": True, "removed": True})
    assert runtime.registry.find("w") is worker and worker.spec.weight == 3.0 and worker.draining


async def test_prices_and_keys_come_from_the_store() -> None:
    runtime, _ = _runtime(build_settings(DATA))
    _, record = new_key("team", KeyLimits(rpm=1), 0.0)
    await runtime.write("clusters", "slow", {"price": {"input_per_mtok": 2, "cached_input_per_mtok": 1, "output_per_mtok": 3}})
    await runtime.write("keys", record.id, record.to_dict())
    assert runtime.pricing.get("slow") == Price(2, 1, 3) and runtime.pricing.get("fast") == Price(1, 1, 0)
    assert runtime.keys.get(record.id) == record


async def test_reload_swaps_a_valid_file_and_rejects_a_bad_one(tmp_path: Path) -> None:
    path = tmp_path / "kvgate.toml"
    path.write_text(toml_config(DATA))
    runtime, swapped = _runtime(build_settings(DATA), path)
    path.write_text(toml_config({**DATA, "models": {"m": {"cluster": "slow"}, "n": {"cluster": "fast"}}}))
    result = await runtime.reload()
    assert result.ok and swapped and runtime.catalog.resolve("n").cluster == "fast"
    assert runtime.catalog.resolve("m").cluster == "slow"
    path.write_text(toml_config({**DATA, "models": {"m": {"cluster": "nowhere"}}}))
    result = await runtime.reload()
    assert not result.ok and any("nowhere" in line for line in result.errors)
    assert runtime.catalog.resolve("m").cluster == "slow" and len(swapped) == 1


async def test_a_reload_asked_by_another_replica_is_applied_once(tmp_path: Path) -> None:
    path = tmp_path / "kvgate.toml"
    path.write_text(toml_config(DATA))
    runtime, swapped = _runtime(build_settings(DATA), path)
    await runtime.sync.poll()
    await runtime.store.put("control", "reload", {"generation": 1, "by": "other-replica"})
    await runtime.sync.poll()
    assert len(swapped) == 1
    await runtime.sync.poll()
    assert len(swapped) == 1


async def test_a_reload_applies_connection_limits_live_and_reports_what_needs_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "kvgate.toml"
    path.write_text(toml_config(DATA))
    runtime, swapped = _runtime(build_settings(DATA), path)
    path.write_text(toml_config({**DATA, "server": {"body_grace_s": 8, "body_min_rate": 100, "max_headers": 50}}))
    result = await runtime.reload()
    assert result.ok and result.restart_required == []  # new connections read them (HttpLimits.of)
    assert runtime.settings.server.body_grace_s == 8 and swapped[-1].server.max_headers == 50
    path.write_text(toml_config({**DATA, "server": {"body_grace_s": 8, "port": 9}}))
    result = await runtime.reload()
    assert result.ok and result.restart_required == ["server"]  # the listener's port needs one
