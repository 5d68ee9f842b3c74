"""The plugin registry: one table of typed, parameterised plugins, and their resolution by name.

:data:`PLUGINS` maps each kebab-case **type** to a :class:`PluginType`: its **kind** (the seam it
plugs into: ``producer``, ``filter``, ``scorer`` or ``picker``), its parameters (a
:class:`~gateway.scheduling.types.Params` model, defaults = the values the plugin was tuned with)
and a factory ``build(params, deps)``. Register a new plugin by adding one row; nothing
elsewhere dispatches on a plugin's type or name.

A **name** is what a profile refers to (llm-d's ``TypedName``): a plugin declared in
``[[routing.plugins]]`` (``type``, ``name``, ``params``; the name defaults to the type), one of
:data:`~gateway.config.BUILTIN_PLUGINS`, or a type used directly with its default parameters.
:func:`declare` checks every declaration once, at build (unknown type, bad parameters: a
:class:`~gateway.config.ConfigError` naming it); :func:`resolve` looks a profile's reference up
and checks its kind. Parameters are validated into their model then, so no request ever reads them
from a table.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from pydantic import ValidationError

from gateway.config import ConfigError, PluginSettings
from gateway.scheduling.filters import BoundedLoadFilter, BoundedShareFilter
from gateway.scheduling.pickers import MaxScoreParams, MaxScorePicker, RotatingMaxScorePicker
from gateway.scheduling.kv_events import KvBlockSets
from gateway.scheduling.producers import StateProducer
from gateway.scheduling.scorers.assignments import AssignmentsScorer
from gateway.scheduling.scorers.inflight import InFlightScorer
from gateway.scheduling.scorers.kv_usage import KvUsageParams, KvUsageScorer
from gateway.scheduling.scorers.latency import LatencyScorer
from gateway.scheduling.scorers.prefill import PrefillParams, PrefillScorer
from gateway.scheduling.scorers.precise_prefix import PrecisePrefixScorer
from gateway.scheduling.scorers.prefix import PrefixScorer
from gateway.scheduling.scorers.queue import QueueParams, QueueScorer
from gateway.scheduling.scorers.session import SessionScorer
from gateway.scheduling.tokens import TokenizeClient, TokenizeProducer
from gateway.scheduling.types import NoParams, Params
from gateway.state.base import StateStore

Kind = Literal["producer", "filter", "scorer", "picker"]


class UnknownPluginError(ConfigError):
    """A profile or a ``[[routing.plugins]]`` entry names a plugin or type that is not registered,
    or one of another kind."""


@dataclass(frozen=True, slots=True)
class PluginDeps:
    """What a factory may give a plugin: the state store, the injected random generator, the
    KV-event block sets (precise mode; empty unless ``routing.kv_events`` feeds them) and the
    ``/tokenize`` client."""

    store: StateStore
    rng: random.Random
    kv: KvBlockSets = field(default_factory=KvBlockSets)
    tokenize: TokenizeClient = field(default_factory=TokenizeClient)


@dataclass(frozen=True, slots=True)
class PluginType:
    """One registered type: its seam, its parameters' model, and ``build(params, deps) -> plugin``."""

    kind: Kind
    params: type[Params]
    build: Callable[[Any, PluginDeps], Any]


def _max_score(params: MaxScoreParams, deps: PluginDeps) -> MaxScorePicker | RotatingMaxScorePicker:
    if params.ties == "rotate":
        return RotatingMaxScorePicker(params.tolerance)
    return MaxScorePicker(deps.rng, params.tolerance)


PLUGINS: Mapping[str, PluginType] = MappingProxyType({
    "state": PluginType("producer", NoParams, lambda p, deps: StateProducer(deps.store)),
    "tokenize": PluginType("producer", NoParams, lambda p, deps: TokenizeProducer(deps.kv, deps.tokenize)),
    "bounded-load": PluginType("filter", NoParams, lambda p, deps: BoundedLoadFilter()),
    "bounded-share": PluginType("filter", NoParams, lambda p, deps: BoundedShareFilter()),
    "prefix": PluginType("scorer", NoParams, lambda p, deps: PrefixScorer()),
    "precise-prefix": PluginType("scorer", NoParams, lambda p, deps: PrecisePrefixScorer()),
    "session": PluginType("scorer", NoParams, lambda p, deps: SessionScorer()),
    "queue": PluginType("scorer", QueueParams, lambda p, deps: QueueScorer(p.half, p.neutral)),
    "kv-usage": PluginType("scorer", KvUsageParams, lambda p, deps: KvUsageScorer(p.neutral)),
    "in-flight": PluginType("scorer", NoParams, lambda p, deps: InFlightScorer()),
    "latency": PluginType("scorer", NoParams, lambda p, deps: LatencyScorer()),
    "assignments": PluginType("scorer", NoParams, lambda p, deps: AssignmentsScorer()),
    "prefill": PluginType("scorer", PrefillParams, lambda p, deps: PrefillScorer(p.half)),
    "max-score": PluginType("picker", MaxScoreParams, _max_score),
})


def _of_kind(kind: Kind) -> Mapping[str, PluginType]:
    return MappingProxyType({name: plugin for name, plugin in PLUGINS.items() if plugin.kind == kind})


# views of the one table by kind (documentation, tests): not registries of their own
PRODUCERS = _of_kind("producer")
FILTERS = _of_kind("filter")
SCORERS = _of_kind("scorer")
PICKERS = _of_kind("picker")


@dataclass(frozen=True, slots=True)
class Plugin:
    """A named plugin with its parameters checked: ``make(deps)`` builds an instance."""

    name: str
    type: str
    kind: Kind
    params: Params
    factory: Callable[[Any, PluginDeps], Any]

    def make(self, deps: PluginDeps) -> Any:
        return self.factory(self.params, deps)


def _params_error(where: str, error: ValidationError) -> ConfigError:
    problems = "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or 'params'}: {item['msg']}" for item in error.errors()
    )
    return ConfigError(f"{where}.params: {problems}")


def _checked(
    where: str, name: str, type_name: str, params: Mapping[str, Any], types: Mapping[str, PluginType],
) -> Plugin:
    plugin_type = types.get(type_name)
    if plugin_type is None:
        raise UnknownPluginError(f"{where}: unknown plugin type {type_name!r}; known: {', '.join(sorted(types))}")
    try:
        checked = plugin_type.params.model_validate(dict(params))
    except ValidationError as error:
        raise _params_error(where, error) from None
    return Plugin(name, type_name, plugin_type.kind, checked, plugin_type.build)


def declare(plugins: Iterable[PluginSettings], types: Mapping[str, PluginType] = PLUGINS) -> dict[str, Plugin]:
    """Declared plugins by name, each type (in ``types``) and its parameters checked.

    Raises:
        UnknownPluginError: a type is not registered.
        ConfigError: two plugins share a name, or parameters do not fit their type's model.
    """
    declared: dict[str, Plugin] = {}
    for plugin in plugins:
        where = f"routing.plugins[{plugin.ref}]"
        if plugin.ref in declared:
            raise ConfigError(f"{where}: duplicate plugin name {plugin.ref!r}")
        declared[plugin.ref] = _checked(where, plugin.ref, plugin.type, plugin.params, types)
    return declared


def resolve(
    declared: Mapping[str, Plugin], ref: str, kind: Kind, profile: str, types: Mapping[str, PluginType] = PLUGINS,
) -> Plugin:
    """The plugin a profile calls ``ref`` in a ``kind`` slot: a declared name, else a type with defaults.

    Raises:
        UnknownPluginError: ``ref`` is neither, or names a plugin of another kind.
    """
    plugin = declared.get(ref)
    if plugin is None:
        if ref not in types:
            known = sorted(
                {*(n for n, p in declared.items() if p.kind == kind), *(n for n, t in types.items() if t.kind == kind)}
            )
            raise UnknownPluginError(f"routing.profiles.{profile}: unknown {kind} {ref!r}; known: {', '.join(known)}")
        plugin = _checked(f"routing.profiles.{profile}", ref, ref, {}, types)
    if plugin.kind != kind:
        raise UnknownPluginError(
            f"routing.profiles.{profile}: {ref!r} is a {plugin.kind} (type {plugin.type!r}), not a {kind}"
        )
    return plugin
