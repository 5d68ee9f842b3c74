"""Every module of ``bench/overhead`` imports against the current ``gateway`` package.

The overhead benchmark runs its pieces (the floor proxy, the kvgate worker launcher) as separate
processes; a name moved inside ``gateway`` once made ``floor`` "unavailable: process exited" in
a benchmark run while every test passed.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import bench.overhead


@pytest.mark.parametrize("name", [m.name for m in pkgutil.iter_modules(bench.overhead.__path__) if m.name != "__main__"])
def test_a_bench_module_imports(name: str) -> None:
    module = importlib.import_module(f"bench.overhead.{name}")
    assert module.__name__ == f"bench.overhead.{name}"
