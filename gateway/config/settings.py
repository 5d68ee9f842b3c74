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
from pydantic_settings import BaseSettings, SettingsError, PydanticBaseSettingsSource, SettingsConfigDict

from gateway.config.scheduling import RoutingSettings, StateSettings
from gateway.config.selection import ClusterSelectionSettings, SelectionSettings, ThinkingSwitch, Tier, check_alias_names

MiB = 1024 * 1024


class ConfigError(ValueError):
    """The configuration is invalid; the message names every bad key (dotted path)."""


def endpoint_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an endpoint's URL (or health URL), or None if it can.

    An endpoint URL is ``http`` or ``https``, has a host and a valid port, and is printable
    ASCII: a request line and a ``Host`` header carry it as is, so anything else (a raw
    non-ASCII byte, a space or a control character) must be percent-encoded (RFC 3986; an
    internationalised host name in its ``xn--`` form).
    """
    if not url.isascii() or not url.isprintable() or " " in url:
        return "must be printable ASCII (percent-encode other characters, RFC 3986)"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a bad port)
    except ValueError:
        return "is not a valid URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an http(s) URL with a host"
    return None


def redact_url(url: str) -> str:
    """``url`` safe to show in messages and views: user info and query values become ``***``.

    ``http://user:secret@host/v1?token=abc`` -> ``http://***@host/v1?token=***``. A value that
    does not parse as a URL is cut to its scheme and ``...``.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return url.split(":", 1)[0] + ":..."
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = "&".join(
        (item.split("=", 1)[0] + "=***") if "=" in item else "***" for item in parts.query.split("&")
    ) if parts.query else ""
    return parts._replace(netloc=netloc, query=query).geturl()


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSettings(_Section):
    """The gateway's own HTTP listener."""

    host: str = Field("127.0.0.1", description="Interface to bind. Anything but loopback requires client keys.")
    port: int = Field(8080, ge=1, le=65535, description="TCP port.")
    max_body_bytes: int = Field(
        32 * MiB, ge=1024, description="Largest accepted request body in bytes; larger gets 413."
    )
    max_header_bytes: int = Field(
        60 * 1024, ge=1024, description="Largest request line + headers in bytes (Envoy's default); larger gets 431."
    )
    max_headers: int = Field(100, ge=8, description="Most header fields per request (Envoy's default); more gets 431.")
    header_timeout_s: float = Field(
        60.0, gt=0, description="Connection open or a request's first byte -> end of its headers, seconds "
        "(nginx client_header_timeout); later gets 408 and the connection closed."
    )
    body_timeout_s: float = Field(
        60.0, gt=0, description="Longest silence between two reads of a request body, seconds (nginx "
        "client_body_timeout); longer gets 408. Never applies to a response being streamed."
    )
    keepalive_s: float = Field(
        5.0, gt=0, description="An idle keep-alive connection is closed after this, seconds (uvicorn's default; "
        "nginx keepalive_timeout is 75)."
    )
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    access_log: bool = Field(False, description="Log one line per request (uvicorn's access log).")
    processes: int = Field(
        1, ge=1, le=256,
        description="Gateway processes sharing the port (SO_REUSEPORT), about one core each; > 1 needs state.backend = redis.",
    )

    def is_loopback(self) -> bool:
        """True if ``host`` binds only a loopback interface (127.0.0.0/8, ::1 or localhost)."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


class ClientKeySettings(_Section):
    """A named client key from the config file and its limits (admin-made keys live in the state store)."""

    name: str = Field(min_length=1, description="Unique name, shown in usage records and metrics.")
    key: SecretStr = Field(description="The secret. Prefer env: KVGATE__AUTH__KEYS='[{...}]'.")
    models: list[str] | None = Field(None, description="Public models (or aliases) this key may use; None: all.")
    rpm: int | None = Field(None, ge=1, description="Requests per minute (sliding window); None: no limit.")
    tpm: int | None = Field(None, ge=1, description="Tokens per minute (input + output, sliding window).")
    budget_usd: float | None = Field(None, gt=0, description="Spend allowed per budget_period, USD.")
    budget_period: Literal["hour", "day", "week", "month"] = Field("month", description="UTC calendar period.")


class AuthSettings(_Section):
    """Client API keys, sent as ``Authorization: Bearer KEY``."""

    api_keys: list[SecretStr] = Field(
        default_factory=list,
        description="Accepted client keys. Empty means no auth, allowed only on a loopback host.",
    )
    keys: list[ClientKeySettings] = Field(
        default_factory=list, description="Named client keys with limits (see [[auth.keys]])."
    )
    required: bool = Field(
        False,
        description="Require a client key even while none exists (keys made only through the admin API): "
        "a state store that comes back empty then refuses every request instead of admitting anyone.",
    )

    def has_keys(self) -> bool:
        """True if any client key is configured (plain or named)."""
        return bool(self.api_keys or self.keys)


class AdminSettings(_Section):
    """The admin REST API under ``/admin`` (disabled while ``api_key`` is empty)."""

    api_key: SecretStr | None = Field(
        None, description="Admin key (Bearer), distinct from client keys. Prefer env KVGATE__ADMIN__API_KEY."
    )
    allowed_networks: list[str] = Field(
        default_factory=lambda: ["127.0.0.0/8", "::1/128"],
        description="Networks (CIDR) an endpoint added through the admin API may resolve to.",
    )
    sync_interval_s: float = Field(
        1.0, gt=0, description="How often a replica polls the state store for admin changes, seconds."
    )
    request_log_size: int = Field(
        1000, ge=0, le=100_000,
        description="Recent requests each replica keeps in memory for GET /admin/requests and the console (0: off).",
    )

    @field_validator("allowed_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for network in value:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError:
                raise ValueError(f"not a network in CIDR notation: {network!r}") from None
        return value


class TimeoutSettings(_Section):
    """Per-attempt time limits, seconds. ``[upstream.timeouts]`` sets defaults; a route may override.

    Long healthy streams are never cut by a total limit: ``total_s`` applies to non-streaming
    requests only; streams are bounded by ``first_byte_s`` and then ``idle_s`` between chunks.
    """

    connect_s: float = Field(5.0, gt=0, description="TCP connect to an endpoint.")
    first_byte_s: float = Field(300.0, gt=0, description="Request sent -> first body bytes (covers prefill).")
    idle_s: float = Field(120.0, gt=0, description="Longest silence between two stream chunks.")
    total_s: float = Field(600.0, gt=0, description="Whole non-streaming attempt.")


class CircuitSettings(_Section):
    """Circuit breaker per endpoint (see gateway/endpoints/circuit.py)."""

    consecutive_failures: int = Field(5, ge=1, description="Failures in a row that open the breaker.")
    failure_ratio: float = Field(0.5, gt=0, le=1, description="Failure share in the window that opens it.")
    min_requests: int = Field(20, ge=1, description="Outcomes needed in the window before the ratio counts.")
    window_s: float = Field(30.0, gt=0, description="Sliding window for the ratio, seconds.")
    cooldown_s: float = Field(5.0, gt=0, description="Open for this long before one half-open probe, seconds.")
    max_cooldown_s: float = Field(60.0, gt=0, description="Cap of the cooldown, doubled after each failed probe.")


class UpstreamSettings(_Section):
    """The pooled HTTP client that talks to endpoints (chosen by measurement: bench/upstream_client.py)."""

    client: Literal["native", "aiohttp"] = Field(
        "native",
        description="native: kvgate's HTTP/1.1 client (httptools parser, gateway/upstream/native.py), the least "
        "CPU per request; aiohttp: aiohttp's client, kept as a fallback.",
    )
    pool_size: int = Field(1024, ge=1, description="Most open connections to all endpoints together.")
    keepalive_s: float = Field(60.0, ge=0, description="Idle keep-alive connections are closed after this, seconds.")
    max_attempts: int = Field(
        3, ge=1, le=10, description="Endpoints tried per request before the gateway gives up (502/503/504)."
    )
    max_retry_after_s: float = Field(
        2.0, ge=0, description="Longest Retry-After (from a 429/503) honoured before the next attempt, seconds."
    )
    max_rate_limit_cooldown_s: float = Field(
        60.0, ge=0, description="A 429 with Retry-After takes its endpoint out of rotation for that long, capped "
        "at this many seconds (no breaker failure counted); 0 disables the cooldown."
    )
    timeouts: TimeoutSettings = Field(default_factory=TimeoutSettings)


class HealthSettings(_Section):
    """Active health checks (``GET`` each endpoint's health URL)."""

    interval_s: float = Field(5.0, gt=0, description="Seconds between two checks of one endpoint.")
    timeout_s: float = Field(2.0, gt=0, description="Timeout of one check, seconds.")
    unhealthy_threshold: int = Field(2, ge=1, description="Consecutive failed checks that eject.")
    healthy_threshold: int = Field(1, ge=1, description="Consecutive successful checks that re-admit.")
    stall_s: float = Field(
        30.0, ge=0, description="Running requests but no new tokens for this long (scraped metrics): stalled, "
        "no new requests. 0 disables."
    )
    probe: Literal["health", "generation"] = Field(
        "health",
        description="health: GET the health URL; generation: also a 1-token completion (catches an engine "
        "that answers /health but cannot generate; works for reasoning models).",
    )


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
        problem = endpoint_url_problem(value)
        if problem is not None:
            raise ValueError(f"{problem}, got {redact_url(value)!r}")
        return value.rstrip("/")


class PriceSettings(_Section):
    """A cluster's price, USD per 1M tokens. A request costs its usage at these prices."""

    input_per_mtok: float = Field(0.0, ge=0, description="USD per 1M uncached input (prompt) tokens.")
    cached_input_per_mtok: float | None = Field(
        None, ge=0, description="USD per 1M cached input tokens; default: input_per_mtok."
    )
    output_per_mtok: float = Field(0.0, ge=0, description="USD per 1M output (completion) tokens.")


class ClusterSettings(_Section):
    """A named pool of endpoints serving one model at one tier (e.g. ``reasoning``, ``fast``)."""

    description: str = ""
    endpoints: list[EndpointSettings] = Field(default_factory=list)
    price: PriceSettings = Field(default_factory=PriceSettings)
    tier: Tier | None = Field(None, description="reasoning | fast: answers the `auto`, `reasoning`, `fast` aliases.")
    max_context_tokens: int | None = Field(None, ge=1, description="Prompt + output the model holds; None: unknown.")
    thinking_switch: ThinkingSwitch = Field(
        "none", description="How to switch thinking off here for a downgraded reasoning request (selection/rewrite.py)."
    )
    selection: ClusterSelectionSettings = Field(default_factory=ClusterSelectionSettings)


class RouteSettings(_Section):
    """A named route: the primary cluster first, then its failover chain."""

    clusters: list[str] = Field(min_length=1, description="Cluster names in the order they are tried.")
    timeouts: TimeoutSettings | None = Field(None, description="Overrides [upstream.timeouts] for this route.")


class ModelSettings(_Section):
    """A public model name clients send, mapped onto a route (or one cluster plus a chain)."""

    cluster: str | None = Field(None, description="Primary cluster serving this model (or give `route`).")
    failover: list[str] = Field(default_factory=list, description="Clusters tried after `cluster`, in order.")
    route: str | None = Field(None, description="A [routes.NAME] entry (instead of `cluster`).")
    aliases: list[str] = Field(default_factory=list, description="Other names clients may use for it.")

    @model_validator(mode="after")
    def _cluster_or_route(self) -> ModelSettings:
        if (self.cluster is None) == (self.route is None):
            raise ValueError("give exactly one of `cluster` or `route`")
        if self.route is not None and self.failover:
            raise ValueError("`failover` goes with `cluster`; a route lists its own chain")
        return self

    def chain(self, routes: dict[str, RouteSettings]) -> list[str]:
        """The clusters this model's requests walk, primary first."""
        if self.route is not None:
            return list(routes[self.route].clusters)
        assert self.cluster is not None
        return [self.cluster, *self.failover]


class MetricsSettings(_Section):
    enabled: bool = Field(True, description="Serve Prometheus text at GET /metrics.")


class QuotaSettings(_Section):
    """Per-key quota enforcement (limits are set per key)."""

    on_store_error: Literal["allow", "deny"] = Field(
        "allow", description="When the state store is unreachable: allow (fail open, counted) or deny (503)."
    )
    usage_retention_days: int = Field(35, ge=1, description="Days a per-key daily usage record is kept.")
    store_timeout_s: float = Field(0.5, gt=0, description="Connect and read timeout of one quota call to Redis, s.")


class TracingSettings(_Section):
    """OpenTelemetry traces: a server span per request, a client span per upstream attempt."""

    enabled: bool = Field(False, description="Export spans over OTLP/HTTP (protobuf).")
    otlp_endpoint: str = Field("http://127.0.0.1:4318/v1/traces", description="OTLP/HTTP traces URL.")
    service_name: str = Field("kvgate", description="service.name resource attribute.")
    sample_ratio: float = Field(1.0, ge=0, le=1, description="Share of new traces sampled (parent-based).")


class LoggingSettings(_Section):
    """Structured logs on stderr; the level is server.log_level."""

    format: Literal["json", "text"] = Field("json", description="One JSON object per line, or plain text.")
    log_payloads: bool = Field(
        False, description="Add request bodies and non-streamed answers (4 KiB each) to access logs."
    )


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
        for route_name, route in self.routes.items():
            for cluster in route.clusters:
                if cluster not in self.clusters:
                    raise ValueError(f"routes.{route_name}.clusters: unknown cluster {cluster!r}")
        public: set[str] = set(self.clusters)
        for model_name, model in self.models.items():
            if model.route is not None and model.route not in self.routes:
                raise ValueError(f"models.{model_name}.route: unknown route {model.route!r}")
            for cluster in ([model.cluster] if model.cluster else []) + model.failover:
                if cluster not in self.clusters:
                    raise ValueError(f"models.{model_name}: unknown cluster {cluster!r}")
            for name in (model_name, *model.aliases):
                if name in public and name != model.cluster:
                    raise ValueError(f"models.{model_name}: name {name!r} is used twice")
                public.add(name)
        admin_key = self.admin.api_key.get_secret_value() if self.admin.api_key else None
        if admin_key and admin_key in {key.get_secret_value() for key in self.auth.api_keys}:
            raise ValueError("admin.api_key: must differ from every client key in auth.api_keys")
        _check_named_keys(self.auth, admin_key)
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


def _check_named_keys(auth: AuthSettings, admin_key: str | None) -> None:
    """``auth.keys``: unique names and secrets, none equal to a plain client key or the admin key."""
    plain = {key.get_secret_value() for key in auth.api_keys}
    names: set[str] = set()
    secrets: set[str] = set()
    for index, entry in enumerate(auth.keys):
        secret = entry.key.get_secret_value()
        if entry.name in names:
            raise ValueError(f"auth.keys.{index}.name: duplicate key name {entry.name!r}")
        if secret in secrets or secret in plain or (admin_key and secret == admin_key):
            raise ValueError(f"auth.keys.{index}.key: must differ from every other key and the admin key")
        names.add(entry.name)
        secrets.add(secret)


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
