"""Typed configuration of endpoint scheduling (``[routing]``) and shared state (``[state]``).

Imported by ``gateway/config/settings.py``; every key is documented in ``config.example.toml``.

``[routing] policy`` names a **profile** (``[routing.profiles.NAME]``: producers, filters, weighted
scorers and one picker). A profile refers to each plugin by **name**: a plugin declared in
``[[routing.plugins]]`` (``type``, ``name``, ``params``: llm-d's ``TypedName`` plus parameters), or
a registered plugin type used directly with its default parameters (``scheduling/registry.py``).
Built-in profiles: ``prefix-aware`` (the default), ``prefix-precise`` (precise mode: the
``tokenize`` producer and the ``precise-prefix`` scorer, with ``[routing.kv_events]`` on),
``least-in-flight`` and ``round-robin`` (the basic policies: the same framework, fewer plugins); a profile of the same name in the config
replaces one. Plugin types, kinds and parameters are checked against the registry when the app is
built (a :class:`~gateway.config.settings.ConfigError` naming the bad one); names here.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from gateway.config.section import Section, zmq_address_problem

BASIC_POLICIES = ("least-in-flight", "round-robin")
"""The built-in profiles that rank on in-flight counts and rotation only (no closed loop)."""


class _Section(Section):
    """This module's sections: :class:`~gateway.config.section.Section` (number fields refuse booleans)."""


class PluginSettings(_Section):
    """One declared plugin (``[[routing.plugins]]``): a registered type, a name, its parameters."""

    type: str = Field(description="A registered plugin type (scheduling/registry.py), e.g. queue.")
    name: str | None = Field(None, description="What profiles call it; defaults to the type.")
    params: dict[str, Any] = Field(default_factory=dict, description="The type's parameters (checked at build).")

    @property
    def ref(self) -> str:
        """The name profiles refer to it by."""
        return self.name or self.type


class ProfileSettings(_Section):
    """One scheduling profile: producers -> filters -> weighted scorers -> picker."""

    producers: list[str] = Field(default_factory=lambda: ["state"], description="Data producers (run concurrently).")
    filters: list[str] = Field(
        default_factory=lambda: ["bounded-share", "bounded-load"], description="Filters, in order."
    )
    scorers: dict[str, float] = Field(
        default_factory=lambda: {
            "prefix": 3.0, "session": 1.0, "in-flight": 1.0, "queue": 1.0, "kv-usage": 0.5, "assignments": 0.5,
            "prefill": 1.0,
        },
        description="Scorer name -> weight (>= 0); each scorer returns [0, 1].",
    )
    picker: str = Field("max-score", description="Picker that ranks the survivors.")
    closed_loop: bool = Field(
        True, description="Hash the prompt, record its prefix blocks where it went, learn from reported usage, "
        "scrape engine stats and keep the per-scorer breakdown. The basic profiles turn it off.",
    )

    @field_validator("scorers")
    @classmethod
    def _weights(cls, value: dict[str, float]) -> dict[str, float]:
        for name, weight in value.items():
            if weight < 0:
                raise ValueError(f"weight of scorer {name!r} must be >= 0, got {weight}")
        return value


BUILTIN_PLUGINS: tuple[PluginSettings, ...] = (
    PluginSettings(type="max-score", name="rotating", params={"ties": "rotate"}),
)
"""Plugins every config has; a declared plugin may not take one of their names."""

BUILTIN_PROFILES: dict[str, ProfileSettings] = {
    # fewest in-flight requests per unit of weight first, ties in rotating order
    "least-in-flight": ProfileSettings(
        producers=[], filters=[], scorers={"in-flight": 1.0}, picker="rotating", closed_loop=False,
    ),
    # rotating order, load ignored
    "round-robin": ProfileSettings(producers=[], filters=[], scorers={}, picker="rotating", closed_loop=False),
    "prefix-aware": ProfileSettings(),
    # precise mode: exact matches from vLLM's KV events (routing.kv_events), the byte-block index as fallback
    "prefix-precise": ProfileSettings(
        producers=["state", "tokenize"],
        scorers={
            "precise-prefix": 3.0, "session": 1.0, "in-flight": 1.0, "queue": 1.0, "kv-usage": 0.5,
            "assignments": 0.5, "prefill": 1.0,
        },
    ),
}


class HotSpotSettings(_Section):
    """The hot-spot guards (bounded loads, Mirrokni, Thorup and Zadimoghaddam, SODA 2018)."""

    load_factor: float = Field(
        2.0, ge=1.0, description="bounded-load: in_flight + 1 <= ceil(load_factor * (total + 1) / n)."
    )
    share_factor: float = Field(
        1.25, ge=1.0, description="bounded-share: recent + 1 <= max(share_factor * (total + 1) / n, share_floor)."
    )
    share_floor: float = Field(8.0, ge=1.0, description="bounded-share never caps an endpoint below this many recent requests.")
    share_half_life: float = Field(
        200.0, gt=0, description="Half-life, in requests, of the recent-assignment counts of `bounded-share`."
    )
    busy_waiting: float = Field(
        1.0, gt=0, description="bounded-share caps an endpoint only while it is loaded: at least this many requests "
        "waiting in its engine queue (vllm:num_requests_waiting) ..."
    )
    busy_kv_usage: float = Field(
        0.8, gt=0, le=1, description="... or its KV cache at least this full (vllm:kv_cache_usage_perc) ..."
    )
    busy_in_flight: float = Field(
        2.0, gt=0, description="... or at least this many requests in flight per unit of weight (all replicas)."
    )


class IndexSettings(_Section):
    """The prefix index (``gateway/prefix``) and its closed loop (``scheduling/feedback.py``)."""

    block_bytes: int = Field(256, ge=16, le=65536, description="Bytes of canonical prompt per hashed block.")
    max_blocks: int = Field(1024, ge=1, description="Most blocks hashed per prompt (bounds CPU and memory).")
    bytes_per_token: float = Field(4.0, gt=0, description="Initial bytes per token, then learned from usage.")
    default_capacity_tokens: int = Field(
        262_144, ge=1, description="KV capacity assumed until the endpoint reports vllm:cache_config_info."
    )
    default_block_tokens: int = Field(16, ge=1, description="Engine KV block size assumed until reported.")
    max_blocks_per_endpoint: int = Field(
        262_144, ge=1,
        description="Hard cap of one endpoint's index, in blocks (memory bound: about 200 bytes of gateway RSS per block, "
        "~50 MB at the default; 262,144 blocks of 256 bytes cover ~16M tokens, more KV than one engine holds).",
    )
    min_scale: float = Field(0.05, gt=0, le=1, description="Lowest capacity correction of the closed loop.")
    max_scale: float = Field(1.5, ge=1, description="Highest capacity correction of the closed loop.")


class ScrapeSettings(_Section):
    """Background scraping of each endpoint's Prometheus ``/metrics``."""

    enabled: bool = Field(True, description="Scrape while the profile runs the closed loop.")
    interval_s: float = Field(1.0, gt=0, description="Seconds between two scrapes of one endpoint.")
    timeout_s: float = Field(1.0, gt=0, description="Timeout of one scrape, seconds.")
    stale_after_s: float = Field(5.0, gt=0, description="Engine stats older than this are marked stale (neutral).")


class KvEventsSettings(_Section):
    """Precise mode: vLLM KV-cache events over ZMQ (managed workers). See scheduling/kv_events.py."""

    enabled: bool = Field(
        False, description="Subscribe to workers' KV events and start managed workers with --kv-events-config "
        "(needs the optional extra precise: pyzmq, msgspec).",
    )
    bind: str = Field(
        "tcp://127.0.0.1:5557", description="ZMQ address the gateway binds; workers connect to it (kvgate up's "
        "workers do). Empty: bind nothing (workers that bind their own publisher are reached through their "
        "endpoint's kv_events address instead, by every gateway process).",
    )

    @field_validator("bind")
    @classmethod
    def _tcp(cls, value: str) -> str:
        if value == "":
            return value
        problem = zmq_address_problem(value, wildcard=True)
        if problem is not None:
            raise ValueError(f"{problem}, got {value[:100]!r}")
        return value

    @property
    def connect(self) -> str | None:
        """The address a local worker connects to (a wildcard bind becomes loopback); None without a bind."""
        if not self.bind:
            return None
        return self.bind.replace("://*:", "://127.0.0.1:").replace("://0.0.0.0:", "://127.0.0.1:")


def same_zmq_socket(bind: str, address: str) -> bool:
    """Whether a bind on ``bind`` takes the socket ``address`` names: the same ipc path, or a tcp
    port bound on that host (equal hosts, both loopback, or a wildcard bind and a loopback host).
    Both are valid (``zmq_address_problem``)."""
    if bind.startswith("ipc://") or address.startswith("ipc://"):
        return bind == address
    (bind_host, _, bind_port), (host, _, port) = bind[6:].rpartition(":"), address[6:].rpartition(":")
    if bind_port != port:
        return False
    bind_host, host = bind_host.strip("[]").lower(), host.strip("[]").lower()
    wildcard = bind_host in ("*", "0.0.0.0", "::")
    return bind_host == host or (_loopback(host) and (wildcard or _loopback(bind_host)))


def _loopback(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host.partition("%")[0]).is_loopback
    except ValueError:
        return False


def check_kv_bind(routing: RoutingSettings, addresses: dict[str, str]) -> None:
    """With ``[routing.kv_events]`` on, its ``bind`` is not an endpoint's ``kv_events`` address
    (``addresses``: dotted path -> address): the gateway would bind the port the worker's publisher
    binds, then connect to its own socket.

    Raises:
        ValueError: ``routing.kv_events.bind: ...`` naming the endpoint's key.
    """
    bind = routing.kv_events.bind
    if not routing.kv_events.enabled or not bind:
        return
    for path, address in addresses.items():
        if same_zmq_socket(bind, address):
            raise ValueError(
                f"routing.kv_events.bind: {bind!r} is the socket of {path} ({address!r}): the gateway binds its "
                "bind to receive from workers that connect, while that endpoint's worker binds its own publisher "
                "there and the gateway connects to it; one socket cannot be both. Set bind = \"\" (connect mode "
                "only) or another port"
            )


class RoutingSettings(_Section):
    """How an endpoint is chosen inside a cluster (the scheduling seam; see gateway/scheduling/)."""

    policy: str = Field(
        "prefix-aware", description="A profile name (built-in: prefix-aware, prefix-precise, least-in-flight, round-robin).",
    )
    plugins: list[PluginSettings] = Field(default_factory=list, description="Declared plugins (type, name, params).")
    profiles: dict[str, ProfileSettings] = Field(default_factory=dict, description="Profiles by name.")
    producer_deadline_ms: float = Field(
        10.0, gt=0, description="A producer that has not answered after this drops its hint."
    )
    hot_spot: HotSpotSettings = Field(default_factory=HotSpotSettings)
    index: IndexSettings = Field(default_factory=IndexSettings)
    scrape: ScrapeSettings = Field(default_factory=ScrapeSettings)
    kv_events: KvEventsSettings = Field(default_factory=KvEventsSettings)

    @model_validator(mode="after")
    def _known_policy(self) -> RoutingSettings:
        if self.policy not in self.all_profiles():
            known = ", ".join(self.all_profiles())
            raise ValueError(f"routing.policy: unknown policy {self.policy!r}; known: {known}")
        return self

    @model_validator(mode="after")
    def _unique_plugin_names(self) -> RoutingSettings:
        builtin = {plugin.ref for plugin in BUILTIN_PLUGINS}
        seen = set(builtin)
        for index, plugin in enumerate(self.plugins):
            if plugin.ref in seen:
                what = " (a built-in plugin)" if plugin.ref in builtin else ""
                raise ValueError(f"routing.plugins[{index}]: duplicate plugin name {plugin.ref!r}{what}")
            seen.add(plugin.ref)
        return self

    def is_precise(self) -> bool:
        """Whether the policy's profile weighs a ``precise-prefix`` scorer (by type, whatever its name):
        the one reader of ``[routing.kv_events]``."""
        types = {plugin.ref: plugin.type for plugin in self.all_plugins()}
        scorers = self.all_profiles()[self.policy].scorers
        return any(types.get(ref, ref) == "precise-prefix" and weight > 0 for ref, weight in scorers.items())

    def kv_events_warnings(self, addressed: int) -> list[str]:
        """What this precise-mode setup silently lacks, given how many endpoints have a
        ``kv_events`` address: each combination that runs, only not as configured (the scorer
        falls back to the approximate index; events nobody reads). Logged at start-up."""
        events = self.kv_events
        if self.is_precise() and not events.enabled:
            return [f"routing.policy {self.policy!r} scores by KV events but routing.kv_events.enabled is false: "
                    "every decision falls back to the approximate prefix index"
                    + (f" ({addressed} endpoint(s) have a kv_events address, not subscribed)" if addressed else "")]
        if not events.enabled:
            return [f"{addressed} endpoint(s) have a kv_events address but routing.kv_events.enabled is false: "
                    "not subscribed"] if addressed else []
        warnings = []
        if not self.is_precise():
            warnings.append(f"routing.kv_events.enabled but routing.policy {self.policy!r} has no precise-prefix "
                            "scorer: KV events are received and never used (policy = \"prefix-precise\" uses them)")
        if not events.bind and not addressed:
            warnings.append("routing.kv_events.enabled with bind = \"\" and no endpoint kv_events address: no KV "
                            "events can arrive (until a reload adds an address); precise decisions use the approximate index")
        return warnings

    def all_plugins(self) -> tuple[PluginSettings, ...]:
        """Built-in plugins, then the declared ones (names are unique)."""
        return (*BUILTIN_PLUGINS, *self.plugins)

    def all_profiles(self) -> dict[str, ProfileSettings]:
        """Built-in profiles overridden by configured ones."""
        return {**BUILTIN_PROFILES, **self.profiles}


class StateSettings(_Section):
    """State shared by gateway replicas (routing's prefix index and in-flight counts; admin changes,
    keys and quotas use the same Redis): this process only (``memory``) or Redis (``redis``)."""

    backend: Literal["memory", "redis"] = Field("memory", description="memory (single replica) or redis.")
    redis_url: str | None = Field(None, description="redis://host:port/db; required when backend = redis.")
    key_prefix: str = Field("kvgate:", min_length=1, description="Prefix of every Redis key kvgate writes.")
    index_ttl_s: float = Field(3600.0, gt=0, description="An endpoint's index key expires after this long unwritten.")
    in_flight_ttl_s: float = Field(10.0, gt=0, description="A replica's in-flight counts expire after this (crash).")
    heartbeat_s: float = Field(
        1.0, gt=0, description="mode direct: a replica republishes its in-flight counts this often (mirror: every refresh_ms).",
    )
    deadline_ms: float = Field(
        25.0, gt=0, description="A Redis call slower than this falls back to the local view (degraded)."
    )
    retry_after_s: float = Field(1.0, ge=0, description="After a failure, Redis is skipped for this long.")
    max_pending_writes: int = Field(10_000, ge=1, description="Queued index writes kept while Redis is slow.")
    mode: Literal["mirror", "direct"] = Field(
        "mirror", description="redis: mirror (answer lookups from a local mirror refreshed every refresh_ms) or direct "
        "(one Redis round trip per lookup).",
    )
    refresh_ms: float = Field(
        40.0, gt=0, description="mirror: pull other replicas' changes and in-flight counts (and push this replica's "
        "batched writes) this often; the staleness bound is 2 x refresh_ms + deadline_ms.",
    )
    mirror_misses: Literal["redis", "local"] = Field(
        "redis", description="mirror: a prompt the mirror matches nowhere asks Redis once (redis) or routes on the "
        "mirror alone (local: no round trip per request at all).",
    )
    change_retention_s: float = Field(
        10.0, gt=0, description="mirror: the change stream keeps this long; a replica further behind reloads the index.",
    )
    response_ttl_s: float = Field(
        86_400.0, gt=0, description="A stored Responses answer's record (id -> endpoint) expires after this long."
    )
    response_max_entries: int = Field(
        100_000, ge=1, description="Stored-response records this replica keeps in memory (oldest out)."
    )
    background_poll_s: float = Field(
        1.0, gt=0, description="A background Response is polled on its endpoint this long after its create, then "
        "at doubling intervals (at most 30 s), until it ends and its key is charged its real usage.",
    )
    background_max_s: float = Field(
        3600.0, gt=0, description="A background Response is polled for at most this long; then its reservation "
        "stays as its charge.",
    )

    @model_validator(mode="after")
    def _url_for_redis(self) -> StateSettings:
        if self.backend == "redis" and not self.redis_url:
            raise ValueError("redis_url: required when backend is 'redis'")
        if self.redis_url and not self.redis_url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("redis_url: must start with redis://, rediss:// or unix:// (redis-py's URL schemes)")
        return self
