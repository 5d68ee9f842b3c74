"""Configuration: the example file loads, the environment wins, bad input names its dotted path."""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from gateway.config import ConfigError, Settings, build_settings, load_settings

EXAMPLE = Path(__file__).resolve().parents[4] / "config.example.toml"


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No KVGATE__ variable from the outer environment leaks into these tests."""
    for name in list(os.environ):
        if name.upper().startswith("KVGATE__"):
            monkeypatch.delenv(name)


def _endpoint(**fields: Any) -> dict[str, Any]:
    return {"url": "http://127.0.0.1:8001/v1", "model": "m", **fields}


def test_example_config_loads() -> None:
    settings = load_settings(EXAMPLE)
    assert isinstance(settings, Settings)
    assert settings.server.port == 8080
    assert settings.server.is_loopback()
    assert settings.clusters and settings.models
    assert all(settings.clusters[name].endpoints for name in settings.clusters)
    assert settings.models["deepseek-r1"].aliases == ["r1"]


def _sections(model: type[BaseModel], path: str) -> Iterator[tuple[str, type[BaseModel]]]:
    """Every fixed table of the settings tree (``server``, ``upstream.timeouts``, ...)."""
    for name, field in model.model_fields.items():
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            dotted = f"{path}.{name}" if path else name
            yield dotted, annotation
            yield from _sections(annotation, dotted)


def _documented(text: str, dotted: str) -> bool:
    """A key or table appears in the example, set or commented out (``key =``, ``[t]``, ``[[t]]``)."""
    *parent, name = dotted.split(".")
    forms = (f"\n{name} =", f"\n# {name} =", f"[{dotted}]", f"[{dotted}.", f"[[{dotted}]]", f"[[{dotted}.")
    return any(form in text for form in forms) if parent else f"[{dotted}]" in text


def test_example_config_documents_every_field() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    missing = []
    for dotted, section in _sections(Settings, ""):
        if not _documented(text, dotted):
            missing.append(f"[{dotted}]")
        for name, field in section.model_fields.items():
            nested = isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
            if not nested and not _documented(text, f"{dotted}.{name}"):
                missing.append(f"{dotted}.{name}")
    assert not missing, f"config.example.toml does not document: {', '.join(missing)}"


def test_no_file_means_defaults() -> None:
    settings = load_settings(None)
    assert settings.server.port == 8080
    assert settings.clusters == {}
    server = settings.server  # a slow POST is cut as Apache mod_reqtimeout's body=20,MinRate=500 would
    assert (server.body_min_rate, server.body_grace_s, server.body_max_s) == (500, 20.0, 0.0)


def test_environment_wins_over_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVGATE__SERVER__PORT", "9000")
    settings = load_settings(EXAMPLE)
    assert settings.server.port == 9000
    assert settings.clusters["fast"].endpoints[1].url == "http://127.0.0.1:8003/v1"  # the rest of the file stays


def test_environment_overrides_one_key_of_a_table(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "kvgate.toml"
    config.write_text('[server]\nport = 8500\nmax_body_bytes = 2048\nlog_level = "debug"\n', encoding="utf-8")
    monkeypatch.setenv("KVGATE__SERVER__PORT", "9001")
    settings = load_settings(config)
    assert settings.server.port == 9001
    assert settings.server.max_body_bytes == 2048
    assert settings.server.log_level == "debug"


def test_environment_lists_are_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVGATE__AUTH__API_KEYS", '["sk-a", "sk-b"]')
    monkeypatch.setenv("KVGATE__SERVER__HOST", "0.0.0.0")
    settings = load_settings(EXAMPLE)
    assert [key.get_secret_value() for key in settings.auth.api_keys] == ["sk-a", "sk-b"]
    assert "sk-a" not in repr(settings)


def test_bad_environment_value_names_its_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVGATE__SERVER__PORT", "not-a-port")
    with pytest.raises(ConfigError, match=r"server\.port: "):
        load_settings(EXAMPLE)


BAD = [
    ("unknown-top-level-key", {"servr": {}}, r"servr: Extra inputs are not permitted"),
    ("unknown-nested-key", {"server": {"prot": 1}}, r"server\.prot: Extra inputs are not permitted"),
    ("port-type", {"server": {"port": "eighty"}}, r"server\.port: "),
    ("port-range", {"server": {"port": 70000}}, r"server\.port: "),
    ("body-limit-too-small", {"server": {"max_body_bytes": 10}}, r"server\.max_body_bytes: "),
    ("log-level", {"server": {"log_level": "loud"}}, r"server\.log_level: "),
    ("policy", {"routing": {"policy": "random"}}, r"routing\.policy: "),
    ("max-attempts", {"upstream": {"max_attempts": 0}}, r"upstream\.max_attempts: "),
    ("timeout", {"upstream": {"read_timeout_s": -1}}, r"upstream\.read_timeout_s: "),
    ("health-interval", {"health": {"interval_s": 0}}, r"health\.interval_s: "),
    (
        "endpoint-url-scheme",
        {"clusters": {"fast": {"endpoints": [_endpoint(url="ftp://host/v1")]}}},
        r"clusters\.fast\.endpoints\.0\.url: .*http\(s\) URL",
    ),
    (
        "endpoint-url-no-host",
        {"clusters": {"fast": {"endpoints": [_endpoint(), _endpoint(url="http:///v1")]}}},
        r"clusters\.fast\.endpoints\.1\.url: ",
    ),
    ("endpoint-missing-model", {"clusters": {"fast": {"endpoints": [{"url": "http://h/v1"}]}}}, r"clusters\.fast\.endpoints\.0\.model: "),
    ("endpoint-weight", {"clusters": {"fast": {"endpoints": [_endpoint(weight=0)]}}}, r"clusters\.fast\.endpoints\.0\.weight: "),
    ("endpoint-unknown-key", {"clusters": {"fast": {"endpoints": [_endpoint(modle="x")]}}}, r"clusters\.fast\.endpoints\.0\.modle: "),
    (
        "duplicate-endpoint-name",
        {"clusters": {"a": {"endpoints": [_endpoint(name="same")]}, "b": {"endpoints": [_endpoint(name="same")]}}},
        r"clusters\.b\.endpoints\.0\.name: duplicate endpoint name 'same'",
    ),
    (
        "default-name-collides",
        {"clusters": {"fast": {"endpoints": [_endpoint(), _endpoint(name="fast-0")]}}},
        r"clusters\.fast\.endpoints\.1\.name: duplicate endpoint name 'fast-0'",
    ),
    (
        "kv-events-address-twice",
        {"clusters": {"a": {"endpoints": [_endpoint(name="w1", kv_events="tcp://h:5601")]},
                      "b": {"endpoints": [_endpoint(name="w2", kv_events="tcp://h:5601")]}}},
        r"clusters\.b\.endpoints\.0\.kv_events: 'tcp://h:5601' is also endpoint 'w1''s address",
    ),
    ("unknown-cluster", {"models": {"m": {"cluster": "nope"}}}, r"models\.m(\.cluster)?: unknown cluster 'nope'"),
    (
        "alias-twice",
        {"clusters": {"c": {}}, "models": {"m": {"cluster": "c", "aliases": ["x"]}, "n": {"cluster": "c", "aliases": ["x"]}}},
        r"models\.n: name 'x' is used twice",
    ),
    (
        "model-named-like-another-cluster",
        {"clusters": {"c": {}, "d": {}}, "models": {"d": {"cluster": "c"}}},
        r"models\.d: name 'd' is used twice",
    ),
    ("public-host-without-keys", {"server": {"host": "0.0.0.0"}}, r"auth\.api_keys: required when server\.host is not loopback"),
    ("hostname-without-keys", {"server": {"host": "gateway.internal"}}, r"auth\.api_keys: required"),
    ("redis-url-scheme", {"state": {"backend": "redis", "redis_url": "http://127.0.0.1:6379/0"}}, r"state(\.redis_url)?: .*redis://"),
    ("redis-url-not-a-url", {"state": {"backend": "redis", "redis_url": "notaurl"}}, r"state(\.redis_url)?: .*rediss://"),
    ("processes-zero", {"server": {"processes": 0}}, r"server\.processes: "),
    ("body-min-rate-negative", {"server": {"body_min_rate": -1}}, r"server\.body_min_rate: "),
    ("body-grace-zero", {"server": {"body_grace_s": 0}}, r"server\.body_grace_s: "),
    ("body-max-negative", {"server": {"body_max_s": -0.5}}, r"server\.body_max_s: "),
]


@pytest.mark.parametrize(("data", "message"), [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_config_names_the_dotted_path(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        build_settings(data)
    assert str(caught.value).startswith("invalid configuration:")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "localhost"])
def test_loopback_host_needs_no_keys(host: str) -> None:
    assert build_settings({"server": {"host": host}}).server.host == host


def test_public_host_with_keys_is_accepted() -> None:
    settings = build_settings({"server": {"host": "0.0.0.0"}, "auth": {"api_keys": ["sk-x"]}})
    assert settings.server.host == "0.0.0.0"


def test_model_may_be_named_like_its_own_cluster() -> None:
    settings = build_settings({"clusters": {"fast": {}}, "models": {"fast": {"cluster": "fast"}}})
    assert settings.models["fast"].cluster == "fast"


def test_endpoint_urls_lose_their_trailing_slash() -> None:
    settings = build_settings({"clusters": {"c": {"endpoints": [_endpoint(url="http://h:1/v1/", health_url="http://h:1/health/")]}}})
    assert settings.clusters["c"].endpoints[0].url == "http://h:1/v1"
    assert settings.clusters["c"].endpoints[0].health_url == "http://h:1/health"


@pytest.mark.parametrize(
    ("content", "message"), [(None, "config file not found"), ("[server\nport = 1", "not valid TOML")], ids=["missing", "bad-toml"]
)
def test_unreadable_file_is_a_config_error(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "kvgate.toml"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_settings(path)


def test_settings_are_frozen() -> None:
    settings = build_settings({})
    with pytest.raises(ValidationError, match="frozen"):
        settings.server.port = 1  # type: ignore[misc]


def test_non_json_list_in_the_environment_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVGATE__AUTH__API_KEYS", "notjson")
    with pytest.raises(ConfigError, match="JSON"):
        build_settings({})
