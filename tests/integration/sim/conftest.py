"""Fixtures of the simulator's integration tests (defined in ``sim_support``)."""

from sim_support import sim, sim_factory

__all__ = ["sim", "sim_factory"]
