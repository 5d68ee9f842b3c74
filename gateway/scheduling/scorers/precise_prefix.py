"""``precise-prefix``: the fraction of the prompt's tokens the endpoint's engine holds, by its KV events.

``score = precise / prompt_tokens`` per candidate, where ``precise`` is the exact match of the
prompt's token ids against the engine's block set (``scheduling/kv_events.py``, read by the
``tokenize`` producer, ``scheduling/tokens.py``). **Falls back** to the approximate ``prefix``
scorer (byte-block index, ``scorers/prefix.py``) for the whole decision when the prompt's
tokens are missing (the producer was late, failed, or no endpoint publishes events yet) or
when a candidate has no event stream (its column would not be comparable with the others').
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.scheduling.scorers.prefix import PrefixScorer
from gateway.scheduling.types import Candidate, Context


class PrecisePrefixScorer:
    def __init__(self) -> None:
        self._approximate = PrefixScorer()

    def score(self, ctx: Context, candidates: Sequence[Candidate]) -> list[float]:
        total = ctx.prompt_tokens
        if not total or any(c.precise is None for c in candidates):
            return self._approximate.score(ctx, candidates)
        return [min(c.precise or 0, total) / total for c in candidates]
