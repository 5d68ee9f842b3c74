"""Number fields of every config section refuse TOML booleans (pydantic's lax mode would read true as 1),
while strings from KVGATE__* environment variables still parse."""

from __future__ import annotations

import tomllib
from typing import Any

import pytest

from gateway.config import ConfigError, build_settings
from gateway.config.section import boolean_for_number


@pytest.mark.parametrize(
    ("toml", "path"),
    [
        ("[server]\nbody_min_rate = true", "server.body_min_rate"),  # int
        ("[server]\nheader_timeout_s = true", "server.header_timeout_s"),  # float
        ("[server]\nport = false", "server.port"),
        ("[admission]\nbatch_max_queue_wait_s = true", "admission.batch_max_queue_wait_s"),  # float | None
        ("[admission.keys.ui]\nmax_queued = true", "admission.keys.ui.max_queued"),  # int | None
        ("[routing.index]\nmax_blocks = true", "routing.index.max_blocks"),
        ("[routing.profiles.p]\nscorers = { prefix = true }", "routing.profiles.p.scorers"),  # dict[str, float]
        ("[auth]\nkeys = [{ name = \"a\", key = \"sk-aaaaaaaaaaaaaaaa\", rpm = true }]", "auth.keys.0.rpm"),
    ],
)
def test_a_boolean_for_a_number_is_rejected_naming_the_field(toml: str, path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_settings(tomllib.loads(toml))
    assert f"{path}: " in str(caught.value)
    assert "not a boolean" in str(caught.value) or "not booleans" in str(caught.value)


def test_numbers_and_booleans_where_they_belong_still_load() -> None:
    settings = build_settings(tomllib.loads(
        "[server]\nbody_min_rate = 0\nheader_timeout_s = 2\naccess_log = true\n"
        "[admission]\nenabled = true\nbatch_max_queue_wait_s = 2.5\n"
    ))
    assert (settings.server.body_min_rate, settings.server.header_timeout_s, settings.server.access_log) == (0, 2.0, True)
    assert settings.admission.enabled is True and settings.admission.batch_max_queue_wait_s == 2.5


@pytest.mark.parametrize(
    ("name", "value", "field", "expected"),
    [
        ("KVGATE__SERVER__BODY_MIN_RATE", "700", ("server", "body_min_rate"), 700),
        ("KVGATE__SERVER__HEADER_TIMEOUT_S", "2.5", ("server", "header_timeout_s"), 2.5),
        ("KVGATE__ADMISSION__BATCH_MAX_QUEUE_WAIT_S", "3", ("admission", "batch_max_queue_wait_s"), 3.0),
        ("KVGATE__SERVER__ACCESS_LOG", "true", ("server", "access_log"), True),
    ],
)
def test_environment_strings_still_parse(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, field: tuple[str, str], expected: Any
) -> None:
    monkeypatch.setenv(name, value)
    section, key = field
    assert getattr(getattr(build_settings({}), section), key) == expected


def test_an_environment_word_for_a_number_is_still_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVGATE__SERVER__BODY_MIN_RATE", "true")
    with pytest.raises(ConfigError, match="server.body_min_rate"):
        build_settings({})


@pytest.mark.parametrize(
    ("annotation", "value", "refused"),
    [
        (dict[str, float] | None, {"a": True}, True),
        (dict[str, float] | None, {"a": 1.5}, False),
        (dict[str, float] | None, None, False),
        (list[int] | None, [1, False], True),
        (int | None, True, True),
        (bool | None, True, False),
        (dict[str, bool] | None, {"a": True}, False),
        (str | int, True, False),  # a union of unlike members is left to pydantic
    ],
)
def test_optional_containers_of_numbers_refuse_booleans(annotation: object, value: object, refused: bool) -> None:
    assert (boolean_for_number(annotation, value) is not None) is refused
