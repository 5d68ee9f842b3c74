"""Builders shared by the routing unit tests."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.endpoints.metrics_parse import EngineStats
from gateway.endpoints.model import Endpoint, EndpointSpec
from gateway.prefix.hashing import PrefixKey
from gateway.protocol.openai import InferenceRequest, Operation, parse_request
from gateway.config import HotSpotSettings
from gateway.scheduling.types import Candidate, Context


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
