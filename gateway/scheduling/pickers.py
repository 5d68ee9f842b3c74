"""Pickers: turn weighted totals into a ranking (the attempt loop tries it in order).

``max-score``: highest total first; ties (within 1e-9) are broken at random (the injected
``random.Random``), so an idle cluster spreads cold prompts instead of always picking the first.
The generator is only drawn from when there is a tie.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from gateway.scheduling.types import Candidate, Context

TIE = 1e-9
"""Totals closer than this to the best of their run count as equal."""


class MaxScorePicker:
    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def pick(self, ctx: Context, candidates: Sequence[Candidate], totals: Sequence[float]) -> list[int]:
        count = len(totals)
        if count < 2:
            return list(range(count))
        order = sorted(range(count), key=totals.__getitem__, reverse=True)
        start = 0
        while start < count - 1:  # shuffle each run of equal totals (the rng runs only on ties)
            floor = totals[order[start]] - TIE
            stop = start + 1
            while stop < count and totals[order[stop]] >= floor:
                stop += 1
            if stop - start > 1:
                run = order[start:stop]
                self._rng.shuffle(run)
                order[start:stop] = run
            start = stop
        return order
