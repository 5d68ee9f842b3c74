"""``ApiDirector.serving`` (``gateway/api_director.py``): the clusters of a route that serve an API.

It remembers its last answer (a public model's route is the same object request after request);
these check that the remembered answer is always the one a fresh computation gives, across
routes, APIs and a settings swap (a reload).
"""

from __future__ import annotations

import pytest

from gateway.api_director import ApiDirector
from gateway.config import build_settings
from gateway.errors import ModelNotSupportedError
from gateway.protocol.apis import BY_NAME
from gateway.selection.route import Route

CLUSTERS = {
    "gen": {"endpoints": [{"url": "http://127.0.0.1:9/v1", "model": "g"}]},
    "pool": {"serves": "pooling", "endpoints": [{"url": "http://127.0.0.1:9/v1", "model": "p"}]},
}


def _answer(director: ApiDirector, route: Route, api: str) -> tuple[str, ...] | str:
    try:
        return director.serving(route, BY_NAME[api], "m").clusters
    except ModelNotSupportedError as error:
        return error.code or "error"


@pytest.mark.parametrize("apis", [["chat", "embeddings"], ["embeddings", "chat", "chat", "embeddings"]])
def test_the_remembered_answer_is_the_fresh_one(apis: list[str]) -> None:
    current = [build_settings({"clusters": CLUSTERS})]
    director = ApiDirector(None, lambda: current[0], None)  # type: ignore[arg-type]  (serving reads the settings only)
    routes = [Route("both", ("gen", "pool")), Route("gen", ("gen",)), Route("pool", ("pool",))]
    for swap in range(2):
        for route in routes:
            for api in apis:
                fresh = ApiDirector(None, lambda: current[0], None)  # type: ignore[arg-type]
                assert _answer(director, route, api) == _answer(fresh, route, api), (swap, route.name, api)
                assert _answer(director, route, api) == _answer(fresh, route, api)  # asked again: remembered
        # a reload swaps the settings: now "pool" generates too
        current[0] = build_settings({"clusters": {**CLUSTERS, "pool": {**CLUSTERS["pool"], "serves": "generate"}}})
    both = Route("both", ("gen", "pool"))
    assert director.serving(both, BY_NAME["chat"], "m") is both  # every cluster generates: the route itself


def test_a_route_cut_to_its_serving_clusters_keeps_its_admission_settings() -> None:
    settings = build_settings({"clusters": {**CLUSTERS, "gen2": CLUSTERS["gen"]}})
    director = ApiDirector(None, lambda: settings, None)  # type: ignore[arg-type]
    route = Route("mixed", ("gen", "pool", "gen2"), spill_to=("pool", "gen2"), max_queue_wait_s=2.5, reason="route")
    served = director.serving(route, BY_NAME["chat"], "m")
    assert served.clusters == ("gen", "gen2") and served.spill_to == ("gen2",)  # a pooling cluster takes no chat spill
    assert (served.max_queue_wait_s, served.reason, served.name) == (2.5, "route", "mixed")
