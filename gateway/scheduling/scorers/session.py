"""``session``: 1 for endpoints that recently served the request's affinity key, else 0.

The affinity key is ``prompt_cache_key`` (OpenAI's cache-routing hint) or, without it, ``user``.
It keeps a conversation or tenant together even when its prompts share no full block yet.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.scheduling.types import Candidate, Context


class SessionScorer:
    def score(self, ctx: Context, candidates: Sequence[Candidate]) -> list[float]:
        return [1.0 if c.affinity else 0.0 for c in candidates]
