"""API keys and quotas on two gateway replicas sharing the real Redis at 127.0.0.1:6379.

Each test gets its own Redis key prefix (removed afterwards) and two kvgate apps, each served by
its own uvicorn on loopback, with one settable wall clock, so quota windows, budget periods and
usage days are fixed. Requests alternate between the replicas: every limit must hold across them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RefusingPort, RunningGateway, chat_body, error_shape_ok
from tests.support.ops import ADMIN_KEY, REDIS_URL, WallClock, admin, drop_prefix, redis_prefix
from tests.support.threads import wait_until

Pair = tuple[RunningGateway, RunningGateway]


def _config(fake: FakeUpstream, prefix: str, **extra: Any) -> dict[str, Any]:
    return {
        "admin": {"api_key": ADMIN_KEY, "sync_interval_s": 0.05},
        "auth": {"api_keys": ["sk-plain-config-key-1"]},
        "state": {"backend": "redis", "redis_url": REDIS_URL, "key_prefix": prefix},
        "health": {"interval_s": 60},
        "clusters": {
            "fast": {
                "endpoints": [{"name": "kq-a", "url": fake.base_url, "model": "qwen-fast"}],
                "price": {"input_per_mtok": 1.0, "cached_input_per_mtok": 0.5, "output_per_mtok": 2.0},
            }
        },
        "models": {"qwen-fast": {"cluster": "fast", "aliases": ["qf"]}, "other": {"cluster": "fast", "aliases": ["ot"]}},
        **extra,
    }


@pytest.fixture
def wall() -> WallClock:
    return WallClock()


@pytest.fixture
def pair(fake_a: FakeUpstream, wall: WallClock) -> Iterator[Pair]:
    prefix = redis_prefix()
    first = RunningGateway(_config(fake_a, prefix), wall_clock=wall, health_checks=False).start()
    second = RunningGateway(_config(fake_a, prefix), wall_clock=wall, health_checks=False).start()
    yield first, second
    first.stop()
    second.stop()
    drop_prefix(prefix)


def _create(gateway: RunningGateway, http: httpx.Client, **fields: Any) -> dict[str, Any]:
    response = http.post(gateway.url + "/admin/keys", headers=admin(), json={"name": "team", **fields})
    assert response.status_code == 201, response.text
    return response.json()


def _chat(gateway: RunningGateway, http: httpx.Client, key: str, **fields: Any) -> httpx.Response:
    return http.post(gateway.base_url + "/chat/completions", headers={"Authorization": f"Bearer {key}"}, json=chat_body(**fields))


def _known_everywhere(pair: Pair, key_id: str) -> bool:
    return all(gateway.app.state.container.ops.gate.table.get(key_id) is not None for gateway in pair)


def test_key_lifecycle_across_replicas(pair: Pair, http: httpx.Client) -> None:
    first, second = pair
    created = _create(first, http)
    secret = created["key"]
    assert secret.startswith("sk-kvg-") and created["prefix"] == secret[:12]
    assert wait_until(lambda: _known_everywhere(pair, created["id"]))
    assert _chat(second, http, secret).status_code == 200
    listed = http.get(second.url + "/admin/keys", headers=admin()).json()["data"]
    mine = next(entry for entry in listed if entry["id"] == created["id"])
    assert mine["prefix"] == secret[:12] and "key" not in mine and "digest" not in mine
    assert secret not in str(listed)
    assert {entry["source"] for entry in listed} == {"config", "admin"}
    revoked = http.delete(second.url + "/admin/keys/" + created["id"], headers=admin())
    assert revoked.status_code == 200 and revoked.json()["revoked"] is True
    assert wait_until(lambda: _chat(first, http, secret).status_code == 401)
    assert _chat(first, http, "sk-plain-config-key-1").status_code == 200
    config_key = next(entry for entry in listed if entry["source"] == "config")
    assert http.delete(first.url + "/admin/keys/" + config_key["id"], headers=admin()).status_code == 409


def test_models_outside_a_keys_list_are_refused(pair: Pair, http: httpx.Client) -> None:
    first, _ = pair
    secret = _create(first, http, models=["qwen-fast"])["key"]
    assert _chat(first, http, secret).status_code == 200
    refused = _chat(first, http, secret, model="other")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "model_not_allowed"
    models = http.get(first.base_url + "/models", headers={"Authorization": f"Bearer {secret}"}).json()["data"]
    assert [entry["id"] for entry in models] == ["qwen-fast", "qf"]  # the model and its alias


def test_a_keys_model_list_covers_the_models_aliases_and_an_alias_only_itself(pair: Pair, http: httpx.Client) -> None:
    """``models = ["qwen-fast"]`` admits its alias ``qf`` (the same model under another name) and
    still refuses ``other`` and its alias ``ot``; ``models = ["qf"]`` admits ``qf`` alone."""
    first, second = pair
    by_model = _create(first, http, models=["qwen-fast"])
    by_alias = _create(first, http, models=["qf"])
    assert wait_until(lambda: _known_everywhere(pair, by_model["id"]) and _known_everywhere(pair, by_alias["id"]))
    auth = {"Authorization": f"Bearer {by_model['key']}"}
    for gateway in pair:
        assert _chat(gateway, http, by_model["key"], model="qf").status_code == 200
        for name in ("other", "ot"):
            refused = _chat(gateway, http, by_model["key"], model=name)
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "model_not_allowed", name
    assert http.get(second.base_url + "/models/qf", headers=auth).status_code == 200
    assert http.get(second.base_url + "/models/ot", headers=auth).status_code == 404
    assert _chat(second, http, by_alias["key"], model="qf").status_code == 200
    refused = _chat(second, http, by_alias["key"], model="qwen-fast")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "model_not_allowed"
    listed = http.get(second.base_url + "/models", headers={"Authorization": f"Bearer {by_alias['key']}"}).json()["data"]
    assert [entry["id"] for entry in listed] == ["qf"]


def _assert_429(response: httpx.Response, code: str) -> None:
    assert response.status_code == 429, response.text
    assert error_shape_ok(response.json())
    assert response.json()["error"]["type"] == "rate_limit_error"
    assert response.json()["error"]["code"] == code
    assert int(response.headers["retry-after"]) >= 1


def test_requests_per_minute_hold_across_replicas(pair: Pair, http: httpx.Client, wall: WallClock) -> None:
    first, second = pair
    created = _create(first, http, rpm=3)
    assert wait_until(lambda: _known_everywhere(pair, created["id"]))
    for gateway in (first, second, first):
        assert _chat(gateway, http, created["key"]).status_code == 200
    refused = _chat(second, http, created["key"])
    _assert_429(refused, "rate_limit_exceeded")
    # the sliding log: the first of the three leaves the last 60 s in 60 s (the wall clock stands still)
    assert refused.headers["retry-after"] == "60"
    wall.now += 59
    assert _chat(second, http, created["key"]).headers["retry-after"] == "1"
    wall.now += 1  # exactly 60 s after the first
    assert _chat(second, http, created["key"]).status_code == 200
    assert first.metric("kvgate_quota_refusals_total", limit="rpm") + second.metric("kvgate_quota_refusals_total", limit="rpm") == 2


def test_tokens_per_minute_hold_across_replicas(pair: Pair, http: httpx.Client) -> None:
    first, second = pair
    created = _create(first, http, tpm=15)
    assert wait_until(lambda: _known_everywhere(pair, created["id"]))
    assert _chat(first, http, created["key"]).status_code == 200  # reserves ~20, settles to 10 (7 + 3)
    gate = first.app.state.container.ops.gate
    assert wait_until(lambda: gate.queued == 0)
    _assert_429(_chat(second, http, created["key"]), "rate_limit_exceeded")


def test_spend_budget_holds_across_replicas_and_usage_is_recorded(pair: Pair, http: httpx.Client, wall: WallClock) -> None:
    first, second = pair
    # each request costs $11e-6; admission reserves the estimate (about 20-32 prompt tokens at $1/M
    # plus max_tokens at $2/M) until the request settles at its actual cost
    created = _create(first, http, budget_usd=0.00006, budget_period="day")
    key_id, secret = created["id"], created["key"]
    assert wait_until(lambda: _known_everywhere(pair, key_id))

    def spent() -> float:
        return http.get(first.url + f"/admin/keys/{key_id}", headers=admin()).json()["spent_usd_this_period"]

    assert _chat(first, http, secret, max_tokens=3).status_code == 200
    assert wait_until(lambda: spent() == pytest.approx(11e-6))  # the reservation settled at the actual cost
    streamed = _chat(second, http, secret, stream=True, stream_options={"include_usage": True}, max_tokens=3)
    assert streamed.status_code == 200
    assert wait_until(lambda: spent() == pytest.approx(22e-6))
    refused = _chat(first, http, secret, max_tokens=100)  # 22e-6 spent + ~220e-6 reserved > 60e-6
    _assert_429(refused, "insufficient_quota")
    assert int(refused.headers["retry-after"]) == 12 * 3600 - 10  # until the UTC day ends
    usage = http.get(second.url + f"/admin/keys/{key_id}/usage", headers=admin()).json()["data"]
    assert usage == [
        {
            "day": "2027-01-13",
            "model": "qwen-fast",
            "cluster": "fast",
            "requests": 2,
            "errors": 0,
            "input_tokens": 14,
            "cached_tokens": 8,
            "output_tokens": 6,
            "cost_micro_usd": 22,
            "cost_usd": 22e-6,
        }
    ]
    wall.now += 86400  # the next day has a fresh budget
    assert _chat(second, http, secret).status_code == 200


@pytest.mark.parametrize(("mode", "status"), [("allow", 200), ("deny", 503)])
def test_an_unreachable_store_fails_open_or_closed_as_configured(
    fake_a: FakeUpstream, http: httpx.Client, mode: str, status: int
) -> None:
    dead = RefusingPort()
    secret = "sk-limited-config-key-1"
    config = _config(fake_a, "unused", quotas={"on_store_error": mode})
    config["state"]["redis_url"] = f"redis://127.0.0.1:{dead.port}/0"
    config["auth"]["keys"] = [{"name": "limited", "key": secret, "rpm": 10}]
    gateway = RunningGateway(config, health_checks=False).start()
    try:
        response = _chat(gateway, http, secret)
        assert response.status_code == status, response.text
        if status == 503:
            assert response.json()["error"]["code"] == "state_store_unavailable"
        assert gateway.metric("kvgate_state_store_errors_total", operation="quota_admit") == 1
    finally:
        gateway.stop()
        dead.close()


def test_an_open_stream_holds_its_max_tokens_against_tpm(pair: Pair, http: httpx.Client) -> None:
    """A stream's reservation (prompt estimate + max_tokens) is held while it is open, as a buffered one's."""
    import threading

    first, second = pair
    created = _create(first, http, tpm=2000)
    assert wait_until(lambda: _known_everywhere(pair, created["id"]))
    headers = {"Authorization": f"Bearer {created['key']}"}
    body = chat_body(stream=True, max_tokens=1500, fake="slow_stream")
    statuses: list[int] = []

    def hold() -> None:
        with httpx.stream("POST", first.base_url + "/chat/completions", headers=headers, json=body, timeout=30) as response:
            statuses.append(response.status_code)
            for _ in response.iter_bytes():
                pass

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert wait_until(lambda: bool(statuses))  # the stream is open (its headers came back)
    _assert_429(_chat(second, http, created["key"], stream=True, max_tokens=1500), "rate_limit_exceeded")
    holder.join(15)
    assert statuses == [200]
