"""The root of kvgate's configuration: :class:`Settings` (every section), and loading it once at start-up.

Sources, lowest to highest priority:

1. field defaults (in the section modules of this package);
2. a TOML file (``kvgate serve --config FILE``; every field is documented in
   ``config.example.toml``, which a test loads);
3. environment variables prefixed ``KVGATE__`` with ``__`` between nested keys, e.g.
   ``KVGATE__SERVER__PORT=9000`` or ``KVGATE__AUTH__API_KEYS='["sk-a","sk-b"]'`` (lists and
   tables as JSON).

Sources are deep-merged, so an environment variable overrides one key of a TOML table and keeps
the rest. Validation failures raise :class:`ConfigError`, whose message names each bad key by its
dotted path (``clusters.fast.endpoints.0.url: ...``). A renamed key keeps working under its old
spelling for one release (:data:`DEPRECATED_KEYS`, see ``gateway/config/aliases.py``), with a
``DeprecatedConfigKey`` warning (a ``FutureWarning``) naming the new one.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from gateway.config.admin import AdminSettings
from gateway.config.admission import AdmissionSettings
from gateway.config.aliases import DEPRECATED_KEYS, apply_deprecated_keys, drop_deprecated_keys
from gateway.config.section import ConfigError
from gateway.config.clusters import ClusterSettings, ModelSettings, RouteSettings, check_references, check_spill
from gateway.config.health import HealthSettings
from gateway.config.keys import AuthSettings, QuotaSettings, check_named_keys
from gateway.config.observability import LoggingSettings, MetricsSettings, TracingSettings
from gateway.config.scheduling import RoutingSettings, StateSettings, check_kv_bind
from gateway.config.selection import SelectionSettings, check_alias_names
from gateway.config.server import ServerSettings
from gateway.config.upstream import CircuitSettings, UpstreamSettings

__all__ = ["DEPRECATED_KEYS", "Settings", "build_settings", "load_settings"]


class Settings(BaseSettings):
    """The whole configuration. Build with :func:`load_settings`; construct directly in tests."""

    model_config = SettingsConfigDict(
        env_prefix="KVGATE__", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    server: ServerSettings = Field(default_factory=ServerSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    admin: AdminSettings = Field(default_factory=AdminSettings)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    circuit: CircuitSettings = Field(default_factory=CircuitSettings)
    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    state: StateSettings = Field(default_factory=StateSettings)
    quotas: QuotaSettings = Field(default_factory=QuotaSettings)
    route_selection: SelectionSettings = Field(default_factory=SelectionSettings)
    tracing: TracingSettings = Field(default_factory=TracingSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    admission: AdmissionSettings = Field(default_factory=AdmissionSettings)
    clusters: dict[str, ClusterSettings] = Field(default_factory=dict)
    routes: dict[str, RouteSettings] = Field(default_factory=dict)
    models: dict[str, ModelSettings] = Field(default_factory=dict)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The TOML file arrives as init kwargs; the environment wins over it.
        return (_CurrentKeysOnly(settings_cls, env_settings), init_settings)

    @model_validator(mode="after")
    def _check_references(self) -> Settings:
        check_references(self.clusters, self.routes, self.models)
        check_spill(self.routes)
        check_kv_bind(self.routing, {
            f"clusters.{name}.endpoints.{index}.kv_events": endpoint.kv_events
            for name, cluster in self.clusters.items() for index, endpoint in enumerate(cluster.endpoints)
            if endpoint.kv_events
        })
        admin_key = self.admin.api_key.get_secret_value() if self.admin.api_key else None
        if admin_key and admin_key in {key.get_secret_value() for key in self.auth.api_keys}:
            raise ValueError("admin.api_key: must differ from every client key in auth.api_keys")
        check_named_keys(self.auth, admin_key)
        check_alias_names(
            {name: cluster.tier for name, cluster in self.clusters.items()},
            [name for model_name, model in self.models.items() for name in (model_name, *model.aliases)],
        )
        if not self.auth.has_keys() and not self.auth.required and not self.server.is_loopback():
            raise ValueError(
                f"auth.api_keys: required when server.host is not loopback (got {self.server.host!r}); "
                "or set auth.required = true and make keys through POST /admin/keys"
            )
        return self

    def endpoint_name(self, cluster: str, index: int) -> str:
        """The effective name of ``clusters[cluster].endpoints[index]``."""
        return self.clusters[cluster].endpoints[index].name or f"{cluster}-{index}"


class _CurrentKeysOnly(PydanticBaseSettingsSource):
    """The environment source without old-spelling keys (``build_settings`` moved their values)."""

    def __init__(self, settings_cls: type[BaseSettings], source: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self._source = source

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self._source.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        return drop_deprecated_keys(self._source())


def _format_errors(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{path}: {message}" if path else message)
    return "invalid configuration:\n  " + "\n  ".join(lines)


def build_settings(data: dict[str, Any] | None = None) -> Settings:
    """Validate ``data`` (a parsed TOML tree) merged under ``KVGATE__`` environment overrides.

    Keys under an old spelling (:data:`DEPRECATED_KEYS`) are moved to their new one first, with a
    ``DeprecatedConfigKey`` warning.

    Raises:
        ConfigError: naming each bad key by its dotted path.
    """
    try:
        return Settings(**apply_deprecated_keys(data or {}))
    except ValidationError as error:
        raise ConfigError(_format_errors(error)) from None
    except SettingsError as error:  # a KVGATE__* variable that should hold JSON does not
        raise ConfigError(f"invalid configuration: {error}; lists and tables in KVGATE__* variables are JSON") from None


def load_settings(path: str | Path | None) -> Settings:
    """Read a TOML file (or nothing, if ``path`` is None) plus environment overrides.

    Raises:
        ConfigError: the file is missing, is not valid TOML, or fails validation.
    """
    data: dict[str, Any] = {}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"{path}: not valid TOML: {error}") from None
    return build_settings(data)
