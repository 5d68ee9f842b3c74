"""``kv-usage``: a fuller KV cache scores lower: ``1 - kv_cache_usage_perc``.

A full cache means new prompts evict cached prefixes and may queue for blocks. Candidates
without fresh engine stats score a neutral 0.5.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.scheduling.types import Candidate, Context

NEUTRAL = 0.5


class KvUsageScorer:
    def score(self, ctx: Context, candidates: Sequence[Candidate]) -> list[float]:
        out = []
        for c in candidates:
            usage = None if c.stats is None else c.stats.kv_usage
            out.append(NEUTRAL if usage is None else 1.0 - min(max(usage, 0.0), 1.0))
        return out
