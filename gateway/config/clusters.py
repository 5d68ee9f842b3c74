"""``[clusters.NAME]``, ``[routes.NAME]`` and ``[models.NAME]``: endpoints grouped into priced clusters,
routes (a primary cluster and its failover chain) and the public model names that map onto them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from gateway.config.admission import MAX_WAIT_S
from gateway.config.section import Section, endpoint_url_problem, redact_url, zmq_address_problem
from gateway.config.selection import ClusterSelectionSettings, ThinkingSwitch, Tier
from gateway.config.upstream import TimeoutSettings


class EndpointSettings(Section):
    """One OpenAI-compatible server (a vLLM worker, another engine, or a provider)."""

    name: str | None = Field(None, description="Unique name; default '<cluster>-<index>'.")
    url: str = Field(description="OpenAI base URL, as an SDK's base_url, e.g. http://10.0.0.5:8000/v1.")
    model: str = Field(description="The model name this endpoint serves (vLLM's --served-model-name).")
    api_key_env: str | None = Field(None, description="Environment variable holding this endpoint's API key.")
    health_url: str | None = Field(None, description="Health URL; default: the URL's origin + /health (vLLM).")
    weight: float = Field(1.0, gt=0, description="Relative capacity; in-flight counts are divided by it.")
    kv_events: str | None = Field(
        None, description="Precise mode, connect side: the ZMQ address of this worker's KV-event publisher as the "
        "gateway reaches it (vLLM's --kv-events-config endpoint tcp://*:PORT seen as tcp://HOST:PORT); every gateway "
        "process connects to it. HOST: a DNS name (RFC 1123 labels), an IPv4 or a bracketed IPv6 address; port "
        "1-65535; or ipc://PATH. Default: none (a worker may instead connect to routing.kv_events.bind).",
    )

    @field_validator("kv_events")
    @classmethod
    def _zmq_address(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        problem = zmq_address_problem(value, wildcard=False)
        if problem is not None:
            name = info.data.get("name")
            raise ValueError(f"{f'endpoint {name!r}: ' if name else ''}{problem}, got {value[:100]!r}")
        return value

    @field_validator("url", "health_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        problem = endpoint_url_problem(value)
        if problem is not None:
            raise ValueError(f"{problem}, got {redact_url(value)!r}")
        return value.rstrip("/")


class PriceSettings(Section):
    """A cluster's price, USD per 1M tokens. A request costs its usage at these prices."""

    input_per_mtok: float = Field(0.0, ge=0, description="USD per 1M uncached input (prompt) tokens.")
    cached_input_per_mtok: float | None = Field(
        None, ge=0, description="USD per 1M cached input tokens; default: input_per_mtok."
    )
    output_per_mtok: float = Field(0.0, ge=0, description="USD per 1M output (completion) tokens.")


class ClusterSettings(Section):
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
    serves: Literal["generate", "pooling"] = Field(
        "generate", description="generate (chat, completions, Responses, Messages) | pooling (embeddings, rerank, score)."
    )


class RouteSettings(Section):
    """A named route: the primary cluster first, then its failover chain."""

    clusters: list[str] = Field(min_length=1, description="Cluster names in the order they are tried.")
    timeouts: TimeoutSettings | None = Field(None, description="Overrides [upstream.timeouts] for this route.")
    max_queue_wait_s: float | None = Field(
        None, gt=0, le=MAX_WAIT_S, description="Admission's wait limit on this route, s (predicted wait before a request starts, "
        "and the gateway queue's TTL); None: [admission] max_queue_wait_s."
    )
    spill_to: list[str] = Field(
        default_factory=list, description="Clusters of this route's chain that take its overflow when the primary is "
        "saturated, in order (managed providers included); empty: queue or shed."
    )


class ModelSettings(Section):
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


def check_references(
    clusters: dict[str, ClusterSettings], routes: dict[str, RouteSettings], models: dict[str, ModelSettings]
) -> None:
    """Cross-section checks: unique endpoint names, known clusters and routes, no public name twice.

    Raises:
        ValueError: naming the bad key by its dotted path (``routes.main.clusters: unknown cluster 'x'``).
    """
    names: set[str] = set()
    publishers: dict[str, str] = {}  # kv_events address -> the endpoint that has it
    for cluster_name, cluster in clusters.items():
        for index, endpoint in enumerate(cluster.endpoints):
            name = endpoint.name or f"{cluster_name}-{index}"
            if name in names:
                raise ValueError(f"clusters.{cluster_name}.endpoints.{index}.name: duplicate endpoint name {name!r}")
            names.add(name)
            if endpoint.kv_events is not None:  # one publisher's events would fill both endpoints' sets
                if endpoint.kv_events in publishers:
                    raise ValueError(f"clusters.{cluster_name}.endpoints.{index}.kv_events: {endpoint.kv_events!r} is also "
                                     f"endpoint {publishers[endpoint.kv_events]!r}'s address (one publisher per worker)")
                publishers[endpoint.kv_events] = name
    for route_name, route in routes.items():
        for cluster in route.clusters:
            if cluster not in clusters:
                raise ValueError(f"routes.{route_name}.clusters: unknown cluster {cluster!r}")
    _check_models(clusters, routes, models)


def check_spill(routes: dict[str, RouteSettings]) -> None:
    """Each route's ``spill_to`` names clusters of its own chain (not its primary), each once.

    Raises:
        ValueError: ``routes.NAME.spill_to: ...``.
    """
    for route_name, route in routes.items():
        for cluster in route.spill_to:
            if cluster not in route.clusters[1:]:
                raise ValueError(
                    f"routes.{route_name}.spill_to: {cluster!r} is not a failover cluster of the route "
                    f"({', '.join(route.clusters[1:]) or 'none'})"
                )
        if len(set(route.spill_to)) != len(route.spill_to):
            raise ValueError(f"routes.{route_name}.spill_to: a cluster is named twice")


def _check_models(
    clusters: dict[str, ClusterSettings], routes: dict[str, RouteSettings], models: dict[str, ModelSettings]
) -> None:
    """Each model names a known route or known clusters; no public name (model, alias, cluster) twice."""
    public: set[str] = set(clusters)
    for model_name, model in models.items():
        if model.route is not None and model.route not in routes:
            raise ValueError(f"models.{model_name}.route: unknown route {model.route!r}")
        for cluster in ([model.cluster] if model.cluster else []) + model.failover:
            if cluster not in clusters:
                raise ValueError(f"models.{model_name}: unknown cluster {cluster!r}")
        for name in (model_name, *model.aliases):
            if name in public and name != model.cluster:
                raise ValueError(f"models.{model_name}: name {name!r} is used twice")
            public.add(name)
