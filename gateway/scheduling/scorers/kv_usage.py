"""``kv-usage``: a fuller KV cache scores lower: ``1 - kv_cache_usage_perc``.

A full cache means new prompts evict cached prefixes and may queue for blocks. Candidates
without fresh engine stats score ``neutral`` (default 0.5).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from gateway.scheduling.types import Candidate, Context, Params

NEUTRAL = 0.5


class KvUsageParams(Params):
    neutral: float = Field(NEUTRAL, ge=0, le=1, description="Score without fresh engine stats.")


class KvUsageScorer:
    def __init__(self, neutral: float = NEUTRAL) -> None:
        self._neutral = neutral

    def score(self, ctx: Context, candidates: Sequence[Candidate]) -> list[float]:
        neutral = self._neutral
        out = []
        for c in candidates:
            usage = None if c.stats is None else c.stats.kv_usage
            out.append(neutral if usage is None else 1.0 - min(max(usage, 0.0), 1.0))
        return out
