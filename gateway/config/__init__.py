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

from gateway.config.section import MiB, ConfigError, Section, StrictNumbers, endpoint_url_problem, redact_url  # noqa: F401
from gateway.config.aliases import DEPRECATED_KEYS, DeprecatedConfigKey, apply_deprecated_keys  # noqa: F401
from gateway.config.server import ServerSettings  # noqa: F401
from gateway.config.keys import ClientKeySettings, AuthSettings, QuotaSettings  # noqa: F401
from gateway.config.admin import AdminSettings  # noqa: F401
from gateway.config.admission import (  # noqa: F401
    PRIORITIES,
    AdmissionKeySettings,
    AdmissionSettings,
    RouteAdmissionSettings,
)
from gateway.config.upstream import TimeoutSettings, CircuitSettings, UpstreamSettings  # noqa: F401
from gateway.config.health import HealthSettings  # noqa: F401
from gateway.config.clusters import (  # noqa: F401
    EndpointSettings,
    PriceSettings,
    ClusterSettings,
    RouteSettings,
    ModelSettings,
)
from gateway.config.observability import MetricsSettings, TracingSettings, LoggingSettings  # noqa: F401
from gateway.config.settings import Settings, build_settings, load_settings  # noqa: F401
