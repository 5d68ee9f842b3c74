"""Renamed config keys keep their old spelling for one release, with a warning (config/aliases.py)."""

from __future__ import annotations

import pytest

from gateway.config import DeprecatedConfigKey, apply_deprecated_keys, build_settings
from gateway.config import aliases

RENAMES = {"server.listen_port": "server.port", "old_tracing": "tracing"}


def test_no_renames_is_a_plain_copy() -> None:
    data = {"server": {"port": 9000}}
    moved = apply_deprecated_keys(data, environ={}, renames={})
    assert moved == data and moved is not data and moved["server"] is not data["server"]


def test_toml_key_under_old_spelling_moves_with_a_warning() -> None:
    with pytest.warns(DeprecatedConfigKey, match="'server.listen_port'.*'server.port'"):
        moved = apply_deprecated_keys({"server": {"listen_port": 9000}}, environ={}, renames=RENAMES)
    assert moved == {"server": {"port": 9000}}


def test_new_spelling_wins_over_old() -> None:
    with pytest.warns(DeprecatedConfigKey):
        moved = apply_deprecated_keys({"server": {"listen_port": 1, "port": 2}}, environ={}, renames=RENAMES)
    assert moved == {"server": {"port": 2}}


def test_renamed_table_merges_into_new() -> None:
    data = {"old_tracing": {"enabled": True, "service_name": "a"}, "tracing": {"service_name": "b"}}
    with pytest.warns(DeprecatedConfigKey):
        moved = apply_deprecated_keys(data, environ={}, renames=RENAMES)
    assert moved == {"tracing": {"enabled": True, "service_name": "b"}}


def test_environment_variable_under_old_spelling() -> None:
    env = {"KVGATE__OLD_TRACING__ENABLED": "true", "KVGATE__SERVER__LISTEN_PORT": "9001", "OTHER": "x"}
    with pytest.warns(DeprecatedConfigKey) as caught:
        moved = apply_deprecated_keys({"server": {"port": 1}}, environ=env, renames=RENAMES)
    assert sorted(str(w.message).split("use ")[1] for w in caught) == ["'KVGATE__SERVER__PORT'", "'KVGATE__TRACING'"]
    assert moved == {"server": {"port": "9001"}, "tracing": {"enabled": "true"}}


def test_build_settings_accepts_the_old_spelling(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aliases, "DEPRECATED_KEYS", dict(RENAMES))
    monkeypatch.setenv("KVGATE__SERVER__LISTEN_PORT", "9002")
    with pytest.warns(DeprecatedConfigKey):
        settings = build_settings({"old_tracing": {"enabled": True}})
    assert settings.server.port == 9002 and settings.tracing.enabled is True
