"""The closed loop's judgement of predictions: rounding noise is not an eviction."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from gateway.prefix.hashing import PrefixKey
from gateway.config import IndexSettings
from gateway.scheduling.feedback import PrefixFeedback
from gateway.observability.metrics import RoutingMetrics
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
    # token-weighted with the default's 1,024 tokens of prior evidence (issue 16: no longer the first reading alone)
    assert loop.bytes_per_token("a") == pytest.approx((4.0 * 1024 + KEY.length) / (1024 + 10_000))
    unscaled = IndexSettings().default_capacity_tokens * loop.bytes_per_token("a") / 256
    assert loop.capacity_blocks("a") == pytest.approx(unscaled, rel=0.01)


def test_one_tiny_prompt_barely_moves_the_ratio_and_real_prompts_take_over() -> None:
    """Issue 16: a 20-token prompt's ratio replaced the default and cut the index's capacity ~8x."""
    loop = feedback()
    default_blocks = loop.capacity_blocks("a")
    tiny = PrefixKey((1,), None, 12, 256)  # 12 bytes of canonical prompt, 20 tokens with the chat template
    loop.observe("a", tiny, 0, usage(20, 0), 0.1, judge=False)
    assert loop.bytes_per_token("a") == pytest.approx((4.0 * 1024 + 12) / (1024 + 20))
    assert loop.capacity_blocks("a") >= 0.97 * default_blocks
    for _ in range(30):  # real prompts: ~5.1 bytes per token
        loop.observe("a", KEY, 0, usage(10_000, 0), 0.1, judge=False)
    assert loop.bytes_per_token("a") == pytest.approx(KEY.length / 10_000, rel=0.01)


def test_the_ratio_follows_a_change_of_traffic() -> None:
    loop = feedback()
    for _ in range(40):
        loop.observe("a", KEY, 0, usage(10_000, 0), 0.1, judge=False)
    for _ in range(200):  # the same bytes now cost twice the tokens
        loop.observe("a", KEY, 0, usage(20_000, 0), 0.1, judge=False)
    assert loop.bytes_per_token("a") == pytest.approx(KEY.length / 20_000, rel=0.05)
