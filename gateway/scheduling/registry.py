"""The plugin registry: kebab-case name -> factory, for producers, filters, scorers and pickers.

Profiles in the config name plugins; :func:`~gateway.scheduling.profile.build_profile` looks them up
here and fails at start-up on an unknown name. A factory receives :class:`PluginDeps` (what a
plugin may need: the state store, the injected random generator) and returns a new instance.
Register a new plugin by adding one row; never dispatch on a plugin's name or type elsewhere.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from gateway.scheduling.filters import BoundedLoadFilter, BoundedShareFilter
from gateway.scheduling.pickers import MaxScorePicker
from gateway.scheduling.producers import StateProducer
from gateway.scheduling.scorers.assignments import AssignmentsScorer
from gateway.scheduling.scorers.inflight import InFlightScorer
from gateway.scheduling.scorers.kv_usage import KvUsageScorer
from gateway.scheduling.scorers.latency import LatencyScorer
from gateway.scheduling.scorers.prefill import PrefillScorer
from gateway.scheduling.scorers.prefix import PrefixScorer
from gateway.scheduling.scorers.queue import QueueScorer
from gateway.scheduling.scorers.session import SessionScorer
from gateway.scheduling.types import DataProducer, Filter, Picker, Scorer
from gateway.state.base import StateStore


@dataclass(frozen=True, slots=True)
class PluginDeps:
    store: StateStore
    rng: random.Random


PRODUCERS: Mapping[str, Callable[[PluginDeps], DataProducer]] = MappingProxyType({
    "state": lambda deps: StateProducer(deps.store),
})
FILTERS: Mapping[str, Callable[[PluginDeps], Filter]] = MappingProxyType({
    "bounded-load": lambda deps: BoundedLoadFilter(),
    "bounded-share": lambda deps: BoundedShareFilter(),
})
SCORERS: Mapping[str, Callable[[PluginDeps], Scorer]] = MappingProxyType({
    "prefix": lambda deps: PrefixScorer(),
    "session": lambda deps: SessionScorer(),
    "queue": lambda deps: QueueScorer(),
    "kv-usage": lambda deps: KvUsageScorer(),
    "in-flight": lambda deps: InFlightScorer(),
    "latency": lambda deps: LatencyScorer(),
    "assignments": lambda deps: AssignmentsScorer(),
    "prefill": lambda deps: PrefillScorer(),
})
PICKERS: Mapping[str, Callable[[PluginDeps], Picker]] = MappingProxyType({
    "max-score": lambda deps: MaxScorePicker(deps.rng),
})
