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
