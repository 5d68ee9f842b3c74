"""The chart's schema for an endpoint's ``kv_events`` refuses what kvgate refuses and takes what it
takes (``gateway/config/section.py``, ``zmq_address_problem``), checked without helm: the schema's
subschema evaluated here (``pattern``, ``maxLength``, ``anyOf``, ``allOf``, ``not``; its patterns
use only what Go's RE2 and Python's ``re`` read alike), on the bad-values fixtures and a corpus."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from gateway.config.section import zmq_address_problem

from .tools import BAD_VALUES, CHART


def _endpoint_kv_events_schema() -> dict[str, Any]:
    schema = json.loads((CHART / "values.schema.json").read_text())
    found: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "url" in node.get("properties", {}) and "kv_events" in node["properties"]:
                found.append(node["properties"]["kv_events"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    assert len(found) == 1, "one static endpoint's kv_events in the schema"
    return found[0]


def _valid(schema: dict[str, Any], value: str) -> bool:
    unknown = set(schema) - {"type", "pattern", "maxLength", "anyOf", "allOf", "not", "description"}
    assert not unknown, f"a keyword this evaluator does not read: {unknown}"
    return (
        schema.get("type", "string") == "string"
        and len(value) <= schema.get("maxLength", len(value))
        and ("pattern" not in schema or re.search(schema["pattern"], value) is not None)
        and all(_valid(part, value) for part in schema.get("allOf", []))
        and ("anyOf" not in schema or any(_valid(part, value) for part in schema["anyOf"]))
        and ("not" not in schema or not _valid(schema["not"], value))
    )


SCHEMA = _endpoint_kv_events_schema()
CORPUS = [
    "tcp://w:5557", "tcp://worker-0.vllm.llm.svc.cluster.local:5557", "tcp://10.20.1.10:5557", "tcp://[::1]:5557",
    "tcp://[fe80::1%eth0]:1", "tcp://[::ffff:10.0.0.1]:65535", "tcp://[2001:db8::]:1", "ipc:///tmp/kv", "tcp://w1:1",
    "tcp://" + "a" * 63 + ":1", "tcp://" + ".".join(["a" * 63] * 3 + ["a" * 61]) + ":1",  # 253 characters
    "tcp://[.]:5601", "tcp://-:5601", "tcp://999.1.1.1:5601", "tcp://1.2.3:5601", "tcp://010.0.0.1:1", "tcp://a_b:1",
    "tcp://-a:1", "tcp://a-:1", "tcp://a..b:1", "tcp://a.:1", "tcp://" + "a" * 64 + ":1",
    "tcp://" + ".".join(["a" * 63] * 3 + ["a" * 62]) + ":1", "tcp://[]:1", "tcp://[1::2::3]:1", "tcp://[::1%]:1",
    "tcp://::1:5557", "tcp://[::1:5557", "tcp://*:5557", "tcp://w:0", "tcp://w:65536", "tcp://w:05557", "tcp://w",
    "tcp://w:", "ipc://", "http://w:5557", "tcp://a b:1", "ipc://a b",
]


@pytest.mark.parametrize("address", CORPUS)
def test_the_schema_and_kvgate_agree(address: str) -> None:
    assert _valid(SCHEMA, address) == (zmq_address_problem(address, wildcard=False) is None)


@pytest.mark.parametrize("values", sorted(BAD_VALUES.glob("static-endpoint-kv-events-*.yaml")), ids=lambda p: p.stem)
def test_each_bad_kv_events_fixture_is_refused_by_both(values: Any) -> None:
    data = yaml.safe_load(values.read_text())
    address = data["config"]["clusters"]["onprem"]["endpoints"][0]["kv_events"]
    assert not _valid(SCHEMA, address)
    assert zmq_address_problem(address, wildcard=False) is not None
