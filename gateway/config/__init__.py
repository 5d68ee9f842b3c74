"""kvgate's configuration: one pydantic-settings tree from TOML + ``KVGATE__`` env, validated once.

The bottom of the house: nothing here imports kvgate above ``gateway/errors.py``. Sections live in
modules named for their concept; this package re-exports every public name so callers import
``from gateway.config import X`` wherever X is defined.
"""

from gateway.config.scheduling import (  # noqa: F401
    BASIC_POLICIES,
    BUILTIN_PLUGINS,
    PluginSettings,
    ProfileSettings,
    BUILTIN_PROFILES,
    HotSpotSettings,
    IndexSettings,
    ScrapeSettings,
    KvEventsSettings,
    RoutingSettings,
    StateSettings,
)

from gateway.config.selection import (  # noqa: F401
    TIERS,
    ALIASES,
    Tier,
    ThinkingSwitch,
    ClusterSelectionSettings,
    KeyRouteLimits,
    SelectionSettings,
    check_alias_names,
)

from gateway.config.settings import (  # noqa: F401
    MiB,
    ConfigError,
    endpoint_url_problem,
    redact_url,
    ServerSettings,
    ClientKeySettings,
    AuthSettings,
    AdminSettings,
    TimeoutSettings,
    CircuitSettings,
    UpstreamSettings,
    HealthSettings,
    EndpointSettings,
    PriceSettings,
    ClusterSettings,
    RouteSettings,
    ModelSettings,
    MetricsSettings,
    QuotaSettings,
    TracingSettings,
    LoggingSettings,
    Settings,
    build_settings,
    load_settings,
)
