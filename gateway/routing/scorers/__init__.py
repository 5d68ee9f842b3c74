"""Scorers: one module per signal, each returning [0, 1] per candidate (1 = best)."""
