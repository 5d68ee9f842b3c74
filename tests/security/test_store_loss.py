"""Issue 17, items 6 and 7: the real Redis loses its data under two running replicas.

Data loss is staged on the real Redis at 127.0.0.1:6379 by deleting every key under the test's
own prefix (never FLUSHDB: the server is shared), in one ``MULTI`` with whatever the store holds
"after" the loss, so no replica can poll in between.

* Item 6: after the loss the admin version counter is back at the value both replicas last
  applied. Before the fix they compared only the counter and kept their old key table (a deleted
  key accepted, a new one refused) until the next admin write; now the store's epoch is gone, a
  new one is written and both re-read the snapshot.
* Item 7: on a loopback gateway whose keys all came from ``POST /admin/keys``, an empty store
  made anonymous requests succeed. Now a replica that has required a key keeps requiring one,
  and ``auth.required = true`` keeps auth on for a replica started on an empty store.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
import redis

from gateway.keys.model import KeyLimits, new_key
from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway
from tests.support.ops import REDIS_URL, drop_prefix, redis_prefix
from tests.support.security_keys import ADMIN_KEY, MESSAGES, NEVER_EJECT, admin_headers, sdk, serve
from tests.support.threads import wait_until


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeUpstream]:
    started = FakeUpstream("store-loss").start()
    yield started
    started.stop()


@pytest.fixture
def prefix() -> Iterator[str]:
    name = redis_prefix()
    yield name
    drop_prefix(name)


def _config(fake: FakeUpstream, prefix: str, **auth: Any) -> dict[str, Any]:
    return {
        "admin": {"api_key": ADMIN_KEY, "sync_interval_s": 0.05},
        "auth": auth,  # no key in the config file: every key comes from the admin API
        "state": {"backend": "redis", "redis_url": REDIS_URL, "key_prefix": prefix},
        **NEVER_EJECT,
        "clusters": {"fast": {"endpoints": [{"name": "loss-0", "url": fake.base_url, "model": "qwen-fast"}]}},
        "models": {"qwen-fast": {"cluster": "fast"}},
    }


def _create_key(gateway: RunningGateway) -> dict[str, Any]:
    response = httpx.post(gateway.url + "/admin/keys", headers=admin_headers(), json={"name": "team"}, timeout=10)
    assert response.status_code == 201, response.text
    return response.json()


def _status(gateway: RunningGateway, key: str) -> int:
    """The status the SDK gets for one chat request with ``key``."""
    with sdk(gateway, key) as client:
        try:
            client.chat.completions.create(model="qwen-fast", messages=MESSAGES)
        except openai.APIStatusError as error:
            return error.status_code
    return 200


def _lose_data(prefix: str, keys: dict[str, dict[str, Any]] | None = None, version: int | None = None) -> None:
    """Delete everything under ``prefix``, then (same transaction) write ``keys`` and ``version``."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        names = list(client.scan_iter(match=f"{prefix}*", count=1000))
        pipe = client.pipeline(transaction=True)
        if names:
            pipe.delete(*names)
        for key_id, document in (keys or {}).items():
            pipe.hset(f"{prefix}:admin:keys", key_id, orjson.dumps(document))
        if version is not None:
            pipe.set(f"{prefix}:admin:version", version)
        pipe.execute()
    finally:
        client.close()


def _version(prefix: str) -> int:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        return int(client.get(f"{prefix}:admin:version") or 0)
    finally:
        client.close()


def test_replicas_reread_a_store_whose_counter_came_back_to_the_same_version(fake: FakeUpstream, prefix: str) -> None:
    with serve(_config(fake, prefix), health_checks=False) as first, serve(_config(fake, prefix), health_checks=False) as second:
        old = _create_key(first)
        assert wait_until(lambda: _status(second, old["key"]) == 200)
        applied = _version(prefix)
        secret, record = new_key("after-loss", KeyLimits(), 0.0)
        # the store lost everything; one write of a new key brought the counter back to `applied`
        _lose_data(prefix, {record.id: record.to_dict()}, applied)
        for replica in (first, second):
            assert wait_until(lambda: _status(replica, old["key"]) == 401), "a key the store no longer has still works"
            assert wait_until(lambda: _status(replica, secret) == 200), "a key the store has is refused"


def test_an_empty_store_never_reopens_auth_on_a_running_replica(fake: FakeUpstream, prefix: str) -> None:
    with serve(_config(fake, prefix), health_checks=False) as gateway:
        assert _status(gateway, "sk-anonymous-guess") == 200  # no key exists yet: loopback admits anyone
        created = _create_key(gateway)
        assert _status(gateway, "sk-anonymous-guess") == 401
        _lose_data(prefix)
        assert wait_until(lambda: _status(gateway, created["key"]) == 401)  # the store took the key with it
        assert _status(gateway, "sk-anonymous-guess") == 401
        with httpx.Client(timeout=10) as http:  # no Authorization header at all
            bare = http.post(gateway.base_url + "/chat/completions", json={"model": "qwen-fast", "messages": MESSAGES})
        assert bare.status_code == 401
        assert _status(gateway, _create_key(gateway)["key"]) == 200  # the admin API still makes keys


def test_auth_required_keeps_a_fresh_replica_on_an_empty_store_closed(fake: FakeUpstream, prefix: str) -> None:
    with serve(_config(fake, prefix, required=True), health_checks=False) as gateway:
        assert _status(gateway, "sk-anonymous-guess") == 401
        with httpx.Client(timeout=10) as http:
            bare = http.post(gateway.base_url + "/chat/completions", json={"model": "qwen-fast", "messages": MESSAGES})
        assert bare.status_code == 401 and bare.json()["error"]["type"] == "invalid_request_error"
        assert _status(gateway, _create_key(gateway)["key"]) == 200
