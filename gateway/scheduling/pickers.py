"""Pickers: turn weighted totals into a ranking (the attempt loop tries it in order).

``max-score``: highest total first. Totals closer than ``tolerance`` (default 1e-9) to the best of
their run are a tie, ordered by ``ties``:

* ``random`` (default): a rotation of the tie at a random start (one ``random()`` draw of the
  injected ``random.Random``: each tied candidate comes first with probability 1/n, the others
  follow it in order), so an idle cluster spreads cold prompts instead of always picking the
  first; the generator is drawn from only on a tie. (A full shuffle cost n - 1 Python-level draws
  per decision, ~120 bytecodes with four endpoints, for an order only failover reads.)
* ``rotate``: in rotating order: the picker's turn advances on every decision, and within a tie
  the candidate at position ``turn mod n`` comes first, then the next ones in order. This is what
  the ``least-in-flight`` and ``round-robin`` profiles use (with the ``in-flight`` scorer or none),
  the order their dedicated schedulers gave before.

The registry builds one of the two classes from ``ties`` (``scheduling/registry.py``): the choice
is made once, not per request.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import Field

from gateway.scheduling.types import Candidate, Context, Params

TIE = 1e-9
"""Totals closer than this to the best of their run count as equal (the default tolerance)."""


class MaxScoreParams(Params):
    ties: Literal["random", "rotate"] = Field("random", description="Order of tied candidates.")
    tolerance: float = Field(TIE, ge=0, description="Totals closer than this to their run's best are tied.")


def _ranked(totals: Sequence[float], tolerance: float, order_run: Callable[[list[int]], None]) -> list[int]:
    """Indices by total, best first; ``order_run`` orders each run of tied indices in place."""
    count = len(totals)
    order = sorted(range(count), key=totals.__getitem__, reverse=True)
    start = 0
    while start < count - 1:
        floor = totals[order[start]] - tolerance
        stop = start + 1
        while stop < count and totals[order[stop]] >= floor:
            stop += 1
        if stop - start > 1:
            run = order[start:stop]
            order_run(run)
            order[start:stop] = run
        start = stop
    return order


class MaxScorePicker:
    """``max-score`` with random ties (see the module docstring)."""

    def __init__(self, rng: random.Random, tolerance: float = TIE) -> None:
        self._rng = rng
        self._tolerance = tolerance

    def pick(self, ctx: Context, candidates: Sequence[Candidate], totals: Sequence[float]) -> list[int]:
        if len(totals) < 2:
            return list(range(len(totals)))
        return _ranked(totals, self._tolerance, self._rotate_at_random)

    def _rotate_at_random(self, run: list[int]) -> None:
        start = int(self._rng.random() * len(run))  # random() < 1.0: start < len(run)
        if start:
            run[:] = run[start:] + run[:start]


class RotatingMaxScorePicker:
    """``max-score`` with ties in rotating order (see the module docstring)."""

    def __init__(self, tolerance: float = TIE) -> None:
        self._tolerance = tolerance
        self._turn = 0

    def pick(self, ctx: Context, candidates: Sequence[Candidate], totals: Sequence[float]) -> list[int]:
        count = len(totals)
        turn = self._turn
        self._turn = turn + 1
        if count < 2:
            return list(range(count))

        def rotate(run: list[int]) -> None:
            run.sort(key=lambda index: (index - turn) % count)

        return _ranked(totals, self._tolerance, rotate)
