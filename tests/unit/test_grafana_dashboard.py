"""deploy/grafana/kvgate-dashboard.json: every PromQL expression names only metrics kvgate exports.

The exported names come from a real app's registry (the text a /metrics scrape returns), so a
renamed or removed instrument fails here, not silently in Grafana.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import create_app
from gateway.config import build_settings

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "kvgate-dashboard.json"
_SUFFIXES = ("", "_total", "_bucket", "_sum", "_count", "_created")


def _expressions(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        query = node.get("query")
        if isinstance(query, dict) and isinstance(query.get("query"), str):
            found.append(query["query"])
        return found + [e for value in node.values() for e in _expressions(value)]
    if isinstance(node, list):
        return [e for item in node for e in _expressions(item)]
    return []


def _exported() -> set[str]:
    app = create_app(build_settings({"clusters": {"c": {"endpoints": [{"url": "http://127.0.0.1:9/v1", "model": "m"}]}}}))
    text = generate_latest(app.state.container.metrics.registry).decode()
    return {family.name + suffix for family in text_string_to_metric_families(text) for suffix in _SUFFIXES}


def test_every_expression_uses_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = _expressions(dashboard)
    assert len(expressions) >= 15
    exported = _exported()
    used = {name for expr in expressions for name in re.findall(r"\bkvgate_[a-z0-9_]+", expr)}
    assert used - exported == set(), f"not exported: {sorted(used - exported)}"
    for required in ("kvgate_time_to_first_token_seconds_bucket", "kvgate_route_decisions_total", "kvgate_failovers_total", "kvgate_cost_usd_total", "kvgate_tokens_total"):
        assert required in used


def test_panels_have_unique_ids_and_a_datasource_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert {var["name"] for var in dashboard["templating"]["list"]} >= {"datasource", "model"}
    assert all(panel["datasource"]["uid"] == "${datasource}" for panel in dashboard["panels"])
