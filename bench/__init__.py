"""Benchmarks: workload traces, a replay runner over simulated workers, an oracle, calibration.

Run from the repository root with ``python -m bench.<module>``; outputs go under ``bench/out/``.
See docs/sim.md.
"""
