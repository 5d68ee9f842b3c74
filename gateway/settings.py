"""kvgate's configuration: one typed pydantic-settings tree, validated once at start-up.

Sources, lowest to highest priority:

1. field defaults below;
2. a TOML file (``kvgate serve --config FILE``; every field is documented in
   ``config.example.toml``, which a test loads);
3. environment variables prefixed ``KVGATE__`` with ``__`` between nested keys, e.g.
   ``KVGATE__SERVER__PORT=9000`` or ``KVGATE__AUTH__API_KEYS='["sk-a","sk-b"]'`` (lists and
   tables as JSON).

Sources are deep-merged, so an environment variable overrides one key of a TOML table and keeps
the rest. Validation failures raise :class:`ConfigError`, whose message names each bad key by its
dotted path (``clusters.fast.endpoints.0.url: ...``).
"""

from __future__ import annotations

import ipaddress
import tomllib
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

MiB = 1024 * 1024


class ConfigError(ValueError):
    """The configuration is invalid; the message names every bad key (dotted path)."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSettings(_Section):
    """The gateway's own HTTP listener."""

    host: str = Field("127.0.0.1", description="Interface to bind. Anything but loopback requires client keys.")
    port: int = Field(8080, ge=1, le=65535, description="TCP port.")
    max_body_bytes: int = Field(
        32 * MiB, ge=1024, description="Largest accepted request body in bytes; larger gets 413."
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    access_log: bool = Field(False, description="Log one line per request (uvicorn's access log).")

    def is_loopback(self) -> bool:
        """True if ``host`` binds only a loopback interface (127.0.0.0/8, ::1 or localhost)."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


class AuthSettings(_Section):
    """Client API keys, sent as ``Authorization: Bearer KEY``."""

    api_keys: list[SecretStr] = Field(
        default_factory=list,
        description="Accepted client keys. Empty means no auth, allowed only on a loopback host.",
    )


class AdminSettings(_Section):
    """The admin REST API under ``/admin`` (disabled while ``api_key`` is empty)."""

    api_key: SecretStr | None = Field(
        None, description="Admin key (Bearer), distinct from client keys. Prefer env KVGATE__ADMIN__API_KEY."
    )


class UpstreamSettings(_Section):
    """The pooled HTTP client that talks to endpoints (aiohttp; chosen by bench/upstream_client.py)."""

    connect_timeout_s: float = Field(5.0, gt=0, description="TCP connect timeout, seconds.")
    read_timeout_s: float = Field(
        600.0, gt=0, description="Longest wait for response headers or between two body chunks, seconds."
    )
    pool_size: int = Field(1024, ge=1, description="Most open connections to all endpoints together.")
    keepalive_s: float = Field(60.0, ge=0, description="Idle keep-alive connections are closed after this, seconds.")
    max_attempts: int = Field(
        3, ge=1, le=10, description="Endpoints tried per request before the gateway gives up (502/503/504)."
    )


class HealthSettings(_Section):
    """Active health checks (``GET`` each endpoint's health URL)."""

    interval_s: float = Field(5.0, gt=0, description="Seconds between two checks of one endpoint.")
    timeout_s: float = Field(2.0, gt=0, description="Timeout of one check, seconds.")
    unhealthy_threshold: int = Field(2, ge=1, description="Consecutive failures (checks or requests) that eject.")
    healthy_threshold: int = Field(1, ge=1, description="Consecutive successful checks that re-admit.")


class EndpointSettings(_Section):
    """One OpenAI-compatible server (a vLLM worker, another engine, or a provider)."""

    name: str | None = Field(None, description="Unique name; default '<cluster>-<index>'.")
    url: str = Field(description="OpenAI base URL, as an SDK's base_url, e.g. http://10.0.0.5:8000/v1.")
    model: str = Field(description="The model name this endpoint serves (vLLM's --served-model-name).")
    api_key_env: str | None = Field(None, description="Environment variable holding this endpoint's API key.")
    health_url: str | None = Field(None, description="Health URL; default: the URL's origin + /health (vLLM).")
    weight: float = Field(1.0, gt=0, description="Relative capacity; in-flight counts are divided by it.")

    @field_validator("url", "health_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"must be an http(s) URL with a host, got {value!r}")
        return value.rstrip("/")


class ClusterSettings(_Section):
    """A named pool of endpoints serving one model at one tier (e.g. ``reasoning``, ``fast``)."""

    description: str = ""
    endpoints: list[EndpointSettings] = Field(default_factory=list)


class ModelSettings(_Section):
    """A public model name clients send, mapped onto a cluster."""

    cluster: str = Field(description="Name of the cluster serving this model.")
    aliases: list[str] = Field(default_factory=list, description="Other names clients may use for it.")


class RoutingSettings(_Section):
    """How an endpoint is chosen inside a cluster (the scheduling seam; see gateway/routing/)."""

    policy: Literal["least-in-flight", "round-robin"] = Field(
        "least-in-flight", description="Scheduler registered under this name in gateway.routing."
    )


class MetricsSettings(_Section):
    enabled: bool = Field(True, description="Serve Prometheus text at GET /metrics.")


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
    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    clusters: dict[str, ClusterSettings] = Field(default_factory=dict)
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
        return (env_settings, init_settings)

    @model_validator(mode="after")
    def _check_references(self) -> Settings:
        names: dict[str, str] = {}
        for cluster_name, cluster in self.clusters.items():
            for index, endpoint in enumerate(cluster.endpoints):
                name = endpoint.name or f"{cluster_name}-{index}"
                if name in names:
                    raise ValueError(f"clusters.{cluster_name}.endpoints.{index}.name: duplicate endpoint name {name!r}")
                names[name] = cluster_name
        public: set[str] = set(self.clusters)
        for model_name, model in self.models.items():
            if model.cluster not in self.clusters:
                raise ValueError(f"models.{model_name}.cluster: unknown cluster {model.cluster!r}")
            for name in (model_name, *model.aliases):
                if name in public and name != model.cluster:
                    raise ValueError(f"models.{model_name}: name {name!r} is used twice")
                public.add(name)
        admin_key = self.admin.api_key.get_secret_value() if self.admin.api_key else None
        if admin_key and admin_key in {key.get_secret_value() for key in self.auth.api_keys}:
            raise ValueError("admin.api_key: must differ from every client key in auth.api_keys")
        if not self.auth.api_keys and not self.server.is_loopback():
            raise ValueError(
                f"auth.api_keys: required when server.host is not loopback (got {self.server.host!r})"
            )
        return self

    def endpoint_name(self, cluster: str, index: int) -> str:
        """The effective name of ``clusters[cluster].endpoints[index]``."""
        return self.clusters[cluster].endpoints[index].name or f"{cluster}-{index}"


def _format_errors(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        path = ".".join(str(part) for part in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{path}: {message}" if path else message)
    return "invalid configuration:\n  " + "\n  ".join(lines)


def build_settings(data: dict[str, Any] | None = None) -> Settings:
    """Validate ``data`` (a parsed TOML tree) merged under ``KVGATE__`` environment overrides.

    Raises:
        ConfigError: naming each bad key by its dotted path.
    """
    try:
        return Settings(**(data or {}))
    except ValidationError as error:
        raise ConfigError(_format_errors(error)) from None


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
