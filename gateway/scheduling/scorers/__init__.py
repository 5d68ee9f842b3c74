"""Scorers: one module per signal, each returning [0, 1] per candidate (1 = best)."""

from collections.abc import Sequence


def inverse_to_max(values: Sequence[float]) -> list[float]:
    """``1 - value / max(values)`` per value: the smallest scores 1, the largest 0; all 1 when none is positive."""
    top = max(values, default=0.0)
    if top <= 0:
        return [1.0] * len(values)
    return [1.0 - value / top for value in values]
