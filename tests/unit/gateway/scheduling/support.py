"""Builders shared by the routing unit tests."""

from __future__ import annotations

from typing import Any

import orjson

import random
import time

from prometheus_client import CollectorRegistry

from gateway.config import BUILTIN_PROFILES, HotSpotSettings, ProfileSettings, RoutingSettings
from gateway.endpoints.metrics_parse import EngineStats
from gateway.endpoints.model import Endpoint, EndpointSpec
from gateway.endpoints.stats import StatsBoard
from gateway.prefix.hashing import PrefixKey, PromptHasher
from gateway.protocol.openai import InferenceRequest, Operation, parse_request
from gateway.scheduling.feedback import PrefixFeedback
from gateway.observability.metrics import RoutingMetrics
from gateway.scheduling.profile import ProfileScheduler
from gateway.scheduling.registry import PluginDeps
from gateway.scheduling.types import Candidate, Context
from gateway.state.memory import MemoryStore


def endpoint(name: str, weight: float = 1.0, in_flight: int = 0) -> Endpoint:
    made = Endpoint(EndpointSpec(name, "c", f"http://{name}/v1", "m", weight=weight))
    made.in_flight = in_flight
    return made


def candidate(name: str = "e", **fields: Any) -> Candidate:
    weight = fields.pop("weight", 1.0)
    return Candidate(endpoint(name, weight), weight=weight, **fields)


def stats(waiting: float | None = None, kv_usage: float | None = None) -> EngineStats:
    return EngineStats("vllm", waiting=waiting, kv_usage=kv_usage)


def context(blocks: int = 10, load_factor: float = 1.25) -> Context:
    request = parse_request(Operation.CHAT, b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}')
    return Context("c", request, PrefixKey(tuple(range(blocks)), None, blocks * 256, 256), HotSpotSettings(load_factor=load_factor))


def chat(content: str, **fields: Any) -> InferenceRequest:
    body = {"model": "m", "messages": [{"role": "system", "content": content}, {"role": "user", "content": "q"}], **fields}
    return parse_request(Operation.CHAT, orjson.dumps(body))


def scheduler(name: str = "prefix-aware", profile: ProfileSettings | None = None, seed: int = 7,
              types: Any = None, **routing: Any) -> ProfileScheduler:
    """A profile scheduler over a memory store: the built-in profile ``name`` unless ``profile`` is given."""
    settings = RoutingSettings(**routing)
    store = MemoryStore()
    metrics = RoutingMetrics(CollectorRegistry())
    return ProfileScheduler(
        name, settings.all_profiles()[name] if profile is None else profile, settings,
        PluginDeps(store, random.Random(seed)), hasher=PromptHasher(), board=StatsBoard(),
        feedback=PrefixFeedback(settings.index, store, metrics, 200.0), metrics=metrics, clock=time.perf_counter,
        **({} if types is None else {"types": types}),
    )


def basic(name: str) -> ProfileScheduler:
    """The built-in basic profile ``name`` (``least-in-flight``, ``round-robin``)."""
    return scheduler(name, BUILTIN_PROFILES[name])
