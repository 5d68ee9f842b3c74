"""The admin REST API over real HTTP: the admin-key guard on every route, endpoints, clusters,
routes, stats and config reload (a bad file is rejected and the old config stays)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway, chat_body, error_shape_ok
from tests.support.ops import ADMIN_KEY, CLIENT_KEY, admin, toml_config


def _config(fake: FakeUpstream) -> dict[str, Any]:
    return {
        "admin": {"api_key": ADMIN_KEY, "sync_interval_s": 0.05},
        "auth": {"api_keys": [CLIENT_KEY]},
        "health": {"interval_s": 60},
        "clusters": {
            "fast": {
                "endpoints": [{"name": "ops-a", "url": fake.base_url, "model": "qwen-fast"}],
                "price": {"input_per_mtok": 1.0, "cached_input_per_mtok": 0.5, "output_per_mtok": 2.0},
            },
            "spare": {"endpoints": [{"name": "spare-a", "url": fake.base_url, "model": "qwen-fast"}]},
        },
        "models": {"qwen-fast": {"cluster": "fast", "aliases": ["qf"]}},
    }


@pytest.fixture(scope="module")
def config_file(tmp_path_factory: pytest.TempPathFactory, fake_a: FakeUpstream) -> Path:
    path = tmp_path_factory.mktemp("admin") / "kvgate.toml"
    path.write_text(toml_config(_config(fake_a)))
    return path


@pytest.fixture(scope="module")
def ops_gateway(config_file: Path, fake_a: FakeUpstream) -> Iterator[RunningGateway]:
    gateway = RunningGateway(_config(fake_a), config_path=config_file, health_checks=False).start()
    yield gateway
    gateway.stop()


def _client(http: httpx.Client) -> dict[str, str]:
    return {"Authorization": f"Bearer {CLIENT_KEY}"}


def _admin_routes(gateway: RunningGateway) -> list[tuple[str, str]]:
    """Every (method, path) under /admin in the OpenAPI document, path parameters filled in."""
    routes = []
    for template, operations in gateway.app.openapi()["paths"].items():
        if template.startswith("/admin"):
            path = re.sub(r"\{[^}]+\}", "ops-a", template)
            routes.extend((method.upper(), path) for method in operations)
    return routes


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": f"Bearer {CLIENT_KEY}"}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {ADMIN_KEY}"}],
    ids=["no-key", "client-key", "wrong-key", "not-bearer"],
)
def test_every_admin_route_refuses_anything_but_the_admin_key(
    ops_gateway: RunningGateway, http: httpx.Client, headers: dict[str, str]
) -> None:
    routes = _admin_routes(ops_gateway)
    assert len(routes) >= 17
    for method, path in routes:
        response = http.request(method, ops_gateway.url + path, headers=headers, json={})
        assert response.status_code == 401, (method, path, response.text)
        assert error_shape_ok(response.json())
        assert response.json()["error"]["code"] == "invalid_api_key"


def test_admin_routes_are_off_without_an_admin_key(gateway: RunningGateway, http: httpx.Client) -> None:
    response = http.get(gateway.url + "/admin/endpoints", headers=admin())
    assert response.status_code == 404
    assert error_shape_ok(response.json())


def test_the_admin_key_is_no_client_key(ops_gateway: RunningGateway, http: httpx.Client) -> None:
    response = http.post(ops_gateway.base_url + "/chat/completions", headers=admin(), json=chat_body())
    assert response.status_code == 401


# (method, path, body, expected status) with the admin key; read-only or self-restoring calls.
ADMIN_CALLS = [
    ("GET", "/admin/endpoints", None, 200),
    ("GET", "/admin/endpoints/ops-a", None, 200),
    ("GET", "/admin/endpoints/nope", None, 404),
    ("PATCH", "/admin/endpoints/ops-a", {"weight": 1.0}, 200),
    ("PATCH", "/admin/endpoints/ops-a", {"weight": -1}, 400),
    ("PATCH", "/admin/endpoints/ops-a", {"colour": "red"}, 400),
    ("POST", "/admin/endpoints/ops-a/undrain", None, 200),
    ("DELETE", "/admin/endpoints/nope", None, 404),
    ("POST", "/admin/endpoints", {"name": "x", "cluster": "nope", "url": "http://127.0.0.1:1/v1", "model": "m"}, 400),
    ("POST", "/admin/endpoints", {"name": "x", "cluster": "fast", "url": "http://10.1.2.3:8000/v1", "model": "m"}, 400),
    ("POST", "/admin/endpoints", {"name": "x", "cluster": "fast", "url": "ftp://127.0.0.1/v1", "model": "m"}, 400),
    ("POST", "/admin/endpoints", {"name": "ops-a", "cluster": "fast", "url": "http://127.0.0.1:1/v1", "model": "m"}, 409),
    ("GET", "/admin/clusters", None, 200),
    ("GET", "/admin/clusters/fast", None, 200),
    ("GET", "/admin/clusters/nope", None, 404),
    ("PATCH", "/admin/clusters/fast", {"weights": {"not-in-fast": 2}}, 400),
    ("GET", "/admin/routes", None, 200),
    ("GET", "/admin/stats", None, 200),
    ("GET", "/admin/keys", None, 200),
    ("GET", "/admin/keys/key-none", None, 404),
    ("DELETE", "/admin/keys/key-none", None, 404),
    ("GET", "/admin/keys/key-none/usage", None, 404),
    ("POST", "/admin/keys", {"name": ""}, 400),
]


@pytest.mark.parametrize(("method", "path", "body", "status"), ADMIN_CALLS, ids=[f"{m} {p} {s}" for m, p, _, s in ADMIN_CALLS])
def test_admin_route_with_the_admin_key(
    ops_gateway: RunningGateway, http: httpx.Client, method: str, path: str, body: Any, status: int
) -> None:
    response = http.request(method, ops_gateway.url + path, headers=admin(), json=body)
    assert response.status_code == status, response.text
    if status >= 400:
        assert error_shape_ok(response.json())


def test_endpoint_view_shows_source_health_circuit_and_latency(ops_gateway: RunningGateway, http: httpx.Client) -> None:
    assert http.post(ops_gateway.base_url + "/chat/completions", headers=_client(http), json=chat_body()).status_code == 200
    view = http.get(ops_gateway.url + "/admin/endpoints/ops-a", headers=admin()).json()
    assert view["source"] == "config"
    assert view["circuit"] == "closed"
    assert view["cluster"] == "fast" and view["model"] == "qwen-fast"
    assert view["latency"]["requests"] >= 1 and view["latency"]["mean_s"] > 0
    assert "prefix_index_blocks" in view


def test_add_drain_and_remove_an_endpoint(ops_gateway: RunningGateway, http: httpx.Client, fake_b: FakeUpstream) -> None:
    added = http.post(
        ops_gateway.url + "/admin/endpoints",
        headers=admin(),
        json={"name": "ops-added", "cluster": "spare", "url": fake_b.base_url, "model": "qwen-fast", "weight": 3},
    )
    assert added.status_code == 201, added.text
    assert added.json()["source"] == "admin" and added.json()["weight"] == 3
    drained = http.post(ops_gateway.url + "/admin/endpoints/spare-a/drain", headers=admin()).json()
    assert drained["draining"] is True
    for _ in range(3):  # only the added endpoint takes new requests now
        response = http.post(ops_gateway.base_url + "/chat/completions", headers=_client(http), json=chat_body(model="spare"))
        assert response.status_code == 200 and response.headers["x-kvgate-endpoint"] == "ops-added"
    http.post(ops_gateway.url + "/admin/endpoints/spare-a/undrain", headers=admin())
    removed = http.delete(ops_gateway.url + "/admin/endpoints/ops-added", headers=admin())
    assert removed.status_code == 200 and removed.json()["deleted"] is True
    names = [e["name"] for e in http.get(ops_gateway.url + "/admin/endpoints", headers=admin()).json()["data"]]
    assert "ops-added" not in names and "spare-a" in names


def test_a_removed_config_endpoint_comes_back_on_reset(ops_gateway: RunningGateway, http: httpx.Client) -> None:
    assert http.delete(ops_gateway.url + "/admin/endpoints/spare-a", headers=admin()).status_code == 200
    response = http.post(ops_gateway.base_url + "/chat/completions", headers=_client(http), json=chat_body(model="spare"))
    assert response.status_code == 503
    assert http.post(ops_gateway.url + "/admin/endpoints/spare-a/reset", headers=admin()).status_code == 200
    response = http.post(ops_gateway.base_url + "/chat/completions", headers=_client(http), json=chat_body(model="spare"))
    assert response.status_code == 200


def test_cluster_prices_and_weights_change_at_runtime(ops_gateway: RunningGateway, http: httpx.Client) -> None:
    patch = {"price": {"input_per_mtok": 3.0, "output_per_mtok": 4.0}, "weights": {"ops-a": 2.5}}
    response = http.patch(ops_gateway.url + "/admin/clusters/fast", headers=admin(), json=patch)
    assert response.status_code == 200, response.text
    assert response.json()["price"] == {"input_per_mtok": 3.0, "cached_input_per_mtok": 3.0, "output_per_mtok": 4.0}
    assert http.get(ops_gateway.url + "/admin/endpoints/ops-a", headers=admin()).json()["weight"] == 2.5
    restore = {"price": {"input_per_mtok": 1.0, "cached_input_per_mtok": 0.5, "output_per_mtok": 2.0}, "weights": {"ops-a": 1.0}}
    assert http.patch(ops_gateway.url + "/admin/clusters/fast", headers=admin(), json=restore).status_code == 200


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("POST", "/admin/endpoints", {"name": "b1", "cluster": "fast", "url": "http://127.0.0.1:1/v1", "model": "m", "weight": True}, "weight"),
        ("PATCH", "/admin/endpoints/ops-a", {"weight": True}, "weight"),
        ("PATCH", "/admin/clusters/fast", {"price": {"input_per_mtok": True, "output_per_mtok": 1.0}}, "input_per_mtok"),
        ("PATCH", "/admin/clusters/fast", {"weights": {"ops-a": True}}, "weights"),
        ("POST", "/admin/keys", {"name": "k", "rpm": True}, "rpm"),
        ("POST", "/admin/keys", {"name": "k", "budget_usd": True}, "budget_usd"),
    ],
    ids=["endpoint-weight", "patch-weight", "price", "cluster-weights", "key-rpm", "key-budget"],
)
def test_admin_bodies_refuse_a_boolean_for_a_number(
    ops_gateway: RunningGateway, http: httpx.Client, method: str, path: str, body: dict[str, Any], field: str,
) -> None:
    before = http.get(ops_gateway.url + "/admin/endpoints/ops-a", headers=admin()).json()["weight"]
    response = http.request(method, ops_gateway.url + path, headers=admin(), json=body)
    assert response.status_code in (400, 422), response.text
    assert error_shape_ok(response.json())
    assert field in response.text and "boolean" in response.text, response.text
    assert http.get(ops_gateway.url + "/admin/endpoints/ops-a", headers=admin()).json()["weight"] == before
    assert http.get(ops_gateway.url + "/admin/endpoints/b1", headers=admin()).status_code == 404


def test_routes_list_models_and_aliases(ops_gateway: RunningGateway, http: httpx.Client) -> None:
    routes = http.get(ops_gateway.url + "/admin/routes", headers=admin()).json()
    by_id = {entry["id"]: entry for entry in routes["models"]}
    assert by_id["qf"]["alias_of"] == "qwen-fast" and by_id["qf"]["clusters"] == ["fast"]


def test_stats_count_requests_tokens_and_cost(ops_gateway: RunningGateway, http: httpx.Client) -> None:
    before = http.get(ops_gateway.url + "/admin/stats", headers=admin()).json()["models"].get("qwen-fast", {"requests": 0, "cost_usd": 0})
    assert http.post(ops_gateway.base_url + "/chat/completions", headers=_client(http), json=chat_body()).status_code == 200
    stats = http.get(ops_gateway.url + "/admin/stats", headers=admin()).json()
    model = stats["models"]["qwen-fast"]
    assert model["requests"] == before["requests"] + 1
    assert model["input_tokens"] >= 7 and model["cached_tokens"] >= 4 and model["output_tokens"] >= 3
    # 3 uncached input at $1/M + 4 cached at $0.5/M + 3 output at $2/M = $11e-6 per request
    assert model["cost_usd"] == pytest.approx(before["cost_usd"] + 11e-6)
    assert stats["clusters"]["fast"]["latency"]["count"] >= 1
    assert stats["endpoints"]["ops-a"]["requests"] >= 1
    lag = stats["loop_lag"]  # the event-loop lag monitor runs by default ([metrics] loop_lag_interval_s)
    for _ in range(100):  # its first tick is 50 ms after start-up
        if lag["samples"] > 0:
            break
        time.sleep(0.05)
        lag = http.get(ops_gateway.url + "/admin/stats", headers=admin()).json()["loop_lag"]
    assert lag["samples"] > 0 and 0 <= lag["p99_ms"] <= lag["max_ms"] <= lag["max_since_start_ms"]


def test_reload_rejects_a_bad_file_and_keeps_the_old_config(
    ops_gateway: RunningGateway, http: httpx.Client, config_file: Path, fake_a: FakeUpstream
) -> None:
    good = config_file.read_text()
    try:
        config_file.write_text(good.replace('"cluster" = "fast"', '"cluster" = "nowhere"') + '\n[server]\n"port" = "eighty"\n')
        response = http.post(ops_gateway.url + "/admin/reload", headers=admin())
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == "invalid_config"
        assert "server.port" in error["message"]
        assert http.post(ops_gateway.base_url + "/chat/completions", headers=_client(http), json=chat_body()).status_code == 200
        config_file.write_text("this is not toml = = =")
        assert http.post(ops_gateway.url + "/admin/reload", headers=admin()).status_code == 400
    finally:
        config_file.write_text(good)


def test_reload_applies_a_valid_file_without_dropping_requests(
    ops_gateway: RunningGateway, http: httpx.Client, config_file: Path, fake_a: FakeUpstream
) -> None:
    good = config_file.read_text()
    data = _config(fake_a)
    data["models"]["qwen-new"] = {"cluster": "fast"}
    data["server"] = {"port": 9}  # restart-only: reported, not applied
    data["admission"] = {"enabled": True}  # switching admission on needs a restart too (its gate is built at start)
    try:
        config_file.write_text(toml_config(data))
        response = http.post(ops_gateway.url + "/admin/reload", headers=admin())
        assert response.status_code == 200, response.text
        assert response.json()["restart_required"] == ["server", "admission.enabled"]
        answer = http.post(ops_gateway.base_url + "/chat/completions", headers=_client(http), json=chat_body(model="qwen-new"))
        assert answer.status_code == 200
    finally:
        config_file.write_text(good)
        assert http.post(ops_gateway.url + "/admin/reload", headers=admin()).status_code == 200
