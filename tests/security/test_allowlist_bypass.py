"""Issue 17, item 1: a key's model allow-list holds for the route a request actually takes.

A key allowed only ``model-a`` sends ``{"model": "model-a"}`` with ``X-Failover-Route`` naming
another model's cluster or route: before the fix kvgate checked the list on the model name only
and served the request from ``b-cluster``. Now admission checks every cluster of the route left
after the header (403 ``model_not_allowed``, ``param`` = ``X-Failover-Route``), nothing reaches
``b-cluster``'s endpoint, and usage is recorded under the cluster that served.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.support.fake_upstream import FakeUpstream
from tests.support.gateway import RunningGateway
from tests.support.security_keys import (
    ADMIN_KEY,
    LIMITED_KEY,
    LIMITED_KEYS,
    MESSAGES,
    NEVER_EJECT,
    OPEN_KEY,
    admin_headers,
    sdk,
    serve,
)
from tests.support.threads import wait_until


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, FakeUpstream]]:
    started = {name: FakeUpstream(name).start() for name in ("a", "spare", "b")}
    yield started
    for fake in started.values():
        fake.stop()


@pytest.fixture(scope="module")
def gateway(fakes: dict[str, FakeUpstream]) -> Iterator[RunningGateway]:
    config = {
        "auth": LIMITED_KEYS,
        "admin": {"api_key": ADMIN_KEY},
        **NEVER_EJECT,
        "clusters": {
            "a-cluster": {"endpoints": [{"name": "a-0", "url": fakes["a"].base_url, "model": "model-a"}]},
            "a-spare": {"endpoints": [{"name": "spare-0", "url": fakes["spare"].base_url, "model": "model-a"}]},
            "b-cluster": {"endpoints": [{"name": "b-0", "url": fakes["b"].base_url, "model": "model-b"}]},
        },
        "routes": {"b-route": {"clusters": ["b-cluster"]}},
        "models": {
            "model-a": {"cluster": "a-cluster", "failover": ["a-spare"]},
            "model-b": {"cluster": "b-cluster"},
        },
    }
    with serve(config) as running:
        yield running


@pytest.mark.parametrize("header", ["b-cluster", "b-route"])
def test_a_forced_route_outside_the_keys_models_is_refused(
    gateway: RunningGateway, fakes: dict[str, FakeUpstream], header: str
) -> None:
    before = len(fakes["b"].requests)
    with sdk(gateway, LIMITED_KEY) as client:
        with pytest.raises(openai.PermissionDeniedError) as refused:
            client.chat.completions.create(model="model-a", messages=MESSAGES, extra_headers={"X-Failover-Route": header})
    error = refused.value.body
    assert refused.value.status_code == 403
    assert error["code"] == "model_not_allowed" and error["param"] == "X-Failover-Route"
    assert "b-cluster" in error["message"]
    assert len(fakes["b"].requests) == before  # nothing reached model-b's endpoint


def test_the_models_own_chain_stays_usable_through_the_header(gateway: RunningGateway) -> None:
    with sdk(gateway, LIMITED_KEY) as client:
        direct = client.chat.completions.with_raw_response.create(model="model-a", messages=MESSAGES)
        chained = client.chat.completions.with_raw_response.create(
            model="model-a", messages=MESSAGES, extra_headers={"X-Failover-Route": "true"}
        )
        with pytest.raises(openai.PermissionDeniedError):
            client.chat.completions.create(model="model-b", messages=MESSAGES)
    assert direct.headers["x-kvgate-cluster"] == "a-cluster"
    assert chained.headers["x-kvgate-cluster"] == "a-spare"


def test_usage_is_recorded_under_the_cluster_that_served(gateway: RunningGateway) -> None:
    with sdk(gateway, OPEN_KEY) as client:  # no model list: the header may pick any route
        served = client.chat.completions.with_raw_response.create(
            model="model-a", messages=MESSAGES, extra_headers={"X-Failover-Route": "b-cluster"}
        )
    assert served.headers["x-kvgate-cluster"] == "b-cluster"

    def rows() -> list[dict]:
        response = httpx.get(gateway.url + "/admin/keys/cfg-open/usage", headers=admin_headers(), timeout=10)
        return [row for row in response.json()["data"] if row["cluster"] == "b-cluster"]

    assert wait_until(lambda: rows() != [])
    assert rows()[0]["requests"] == 1 and rows()[0]["input_tokens"] == 7
