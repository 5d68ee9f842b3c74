"""``prefill``: less prefill work ahead of and including this request scores higher.

``work = prefill in flight on the endpoint + this prompt's bytes it does not hold`` (both in
bytes of canonical prompt: ``scheduling/prefill.py`` and ``length - matched * block_bytes``), and
``score = (best + H) / (work + H)`` with ``H = half``, default 4096 bytes (about 1k tokens): the endpoint where
the request would wait least for its first token scores 1; differences well under ``H`` hardly
count, so an idle cluster leaves the choice to the other scorers. Unlike ``prefix`` alone, it
moves a warm request off an endpoint busy prefilling a long cold prompt when the saving in its
own prefill is smaller than the wait, and it sends cold prompts where no other cold prompt is
being prefilled.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from gateway.scheduling.types import Candidate, Context, Params

HALF = 4096.0


class PrefillParams(Params):
    half: float = Field(HALF, gt=0, description="Bytes of prefill work that halve the score of an idle endpoint.")


class PrefillScorer:
    def __init__(self, half: float = HALF) -> None:
        self._half = half

    def score(self, ctx: Context, candidates: Sequence[Candidate]) -> list[float]:
        half = self._half
        length = ctx.key.length
        block = ctx.key.block_bytes
        work = [c.prefill + max(length - c.matched * block, 0) for c in candidates]
        best = min(work, default=0.0) + half
        return [best / (w + half) for w in work]
