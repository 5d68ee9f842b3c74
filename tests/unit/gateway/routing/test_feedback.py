"""The closed loop's judgement of predictions: rounding noise is not an eviction."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from gateway.prefix.hashing import PrefixKey
from gateway.routing.config import IndexSettings
from gateway.routing.feedback import PrefixFeedback
from gateway.routing.metrics import RoutingMetrics
from gateway.state.memory import MemoryStore

KEY = PrefixKey(tuple(range(200)), None, 200 * 256 + 100, 256)  # ~51 KB of canonical prompt


def feedback() -> PrefixFeedback:
    return PrefixFeedback(IndexSettings(), MemoryStore(), RoutingMetrics(CollectorRegistry()), 200.0)


def usage(prompt: int, cached: int) -> dict[str, object]:
    return {"prompt_tokens": prompt, "completion_tokens": 8, "prompt_tokens_details": {"cached_tokens": cached}}


@pytest.mark.parametrize(
    ("prompt", "cached", "outcome"),
    [
        (10_000, 9_984, "exact"),   # 200 of 200 blocks: the whole prompt but its last block
        (10_000, 9_920, "exact"),   # four 16-token blocks less: rounding between byte and token blocks
        (9_000, 8_976, "exact"),    # another bytes-per-token ratio for this request: judged with its own
        (10_000, 4_992, "over"),    # half of it is gone: the engine evicted what the index holds
        (10_000, 0, "over"),
    ],
)
def test_outcomes_use_the_request_own_ratio_and_a_granularity_tolerance(prompt: int, cached: int, outcome: str) -> None:
    loop = feedback()
    assert loop.observe("a", KEY, 200, usage(prompt, cached), 0.1) == outcome


def test_an_unmatched_prompt_reported_warm_is_under() -> None:
    assert feedback().observe("a", KEY, 0, usage(10_000, 5_000), 0.1) == "under"


def test_rounding_noise_leaves_the_capacity_alone() -> None:
    loop = feedback()
    for i in range(200):  # cached within a few engine blocks of the prediction, both ways
        loop.observe("a", KEY, 150, usage(10_000 + 37 * (i % 7), 7_488 + 16 * ((i % 5) - 2)), 0.1)
    unscaled = IndexSettings().default_capacity_tokens * loop.bytes_per_token("a") / 256
    assert loop.capacity_blocks("a") == pytest.approx(unscaled, rel=0.01)
    for _ in range(5):
        loop.observe("a", KEY, 150, usage(10_000, 0), 0.1)
    assert loop.capacity_blocks("a") < 0.7 * unscaled


def test_an_unjudged_observation_learns_the_ratio_but_leaves_the_capacity() -> None:
    loop = feedback()
    assert loop.observe("a", KEY, 200, usage(10_000, 0), 0.1, judge=False) is None
    assert loop.bytes_per_token("a") == pytest.approx(KEY.length / 10_000)
    unscaled = IndexSettings().default_capacity_tokens * loop.bytes_per_token("a") / 256
    assert loop.capacity_blocks("a") == pytest.approx(unscaled, rel=0.01)
