"""``[admission]`` and the per-route admission fields: defaults, bounds, lookups."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from gateway.config.admission import AdmissionKeySettings, AdmissionSettings, RouteAdmissionSettings


def test_defaults() -> None:
    settings = AdmissionSettings()
    assert settings.enabled is False
    assert (settings.max_queue_wait_s, settings.max_queue_depth, settings.max_queued_per_key) == (10.0, 1024, None)
    assert settings.key("anyone") == AdmissionKeySettings()


def test_keys_and_default_priority() -> None:
    settings = AdmissionSettings(default_priority="batch", keys={"ui": {"weight": 2.0, "priority": "interactive"}})
    assert settings.key("ui").weight == 2.0
    assert settings.key("cron").priority == "batch"


def test_route_fields() -> None:
    route = RouteAdmissionSettings(spill_to=["managed-r1"])
    assert route.wait_limit(AdmissionSettings(max_queue_wait_s=3.0)) == 3.0
    assert RouteAdmissionSettings(max_queue_wait_s=1.5).wait_limit(AdmissionSettings()) == 1.5


@pytest.mark.parametrize(
    ("model", "data"),
    [
        (AdmissionSettings, {"max_queue_wait_s": 0}),
        (AdmissionSettings, {"max_queue_wait_s": float("inf")}),  # the queue's TTL: finite, at most MAX_WAIT_S
        (AdmissionSettings, {"max_queue_wait_s": 1e300}),
        (AdmissionSettings, {"batch_max_queue_wait_s": float("inf")}),
        (RouteAdmissionSettings, {"max_queue_wait_s": float("inf")}),
        (AdmissionSettings, {"kv_saturated": 1.5}),
        (AdmissionSettings, {"surprise": 1}),
        (AdmissionKeySettings, {"weight": 0}),
        (AdmissionKeySettings, {"priority": "urgent"}),
        (RouteAdmissionSettings, {"spill_to": ["a", "a"]}),
    ],
)
def test_invalid(model: type, data: dict) -> None:
    with pytest.raises(ValidationError):
        model(**data)


def test_batch_wait_limit() -> None:
    settings = AdmissionSettings(max_queue_wait_s=2.0, batch_max_queue_wait_s=6.0)
    assert (settings.wait_limit(None, 0), settings.wait_limit(1.0, 0), settings.wait_limit(1.0, 1)) == (2.0, 1.0, 6.0)
    assert AdmissionSettings().wait_limit(1.0, 1) == 1.0


def _with_route(**route: object) -> dict:
    endpoint = {"url": "http://127.0.0.1:8001/v1", "model": "m"}
    return {
        "clusters": {"local": {"endpoints": [endpoint]}, "managed": {"endpoints": [endpoint | {"name": "managed-0"}]}},
        "routes": {"r": {"clusters": ["local", "managed"], **route}},
    }


def test_settings_carry_the_section_and_the_route_fields_onto_the_route() -> None:
    from gateway.config import build_settings
    from gateway.selection.catalog import ModelCatalog

    settings = build_settings({"admission": {"enabled": True}, **_with_route(spill_to=["managed"], max_queue_wait_s=2.0)})
    assert settings.admission.enabled is True
    assert settings.routes["r"].spill_to == ["managed"]
    route = ModelCatalog.from_settings(settings).routes["r"]
    assert route.spill_to == ("managed",) and route.max_queue_wait_s == 2.0


@pytest.mark.parametrize("spill_to", [["elsewhere"], ["local"], ["managed", "managed"]])
def test_spill_to_names_failover_clusters_of_its_route_once(spill_to: list[str]) -> None:
    from gateway.config import ConfigError, build_settings

    with pytest.raises(ConfigError, match="routes.r.spill_to"):
        build_settings(_with_route(spill_to=spill_to))
