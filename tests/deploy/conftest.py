"""Fixtures for the deployment tests: rendered chart manifests, cached once per values file."""

from __future__ import annotations

from pathlib import Path

import pytest

from .tools import CI_VALUES, Rendered, render

POSITIVE_VALUES = sorted(CI_VALUES.glob("*-values.yaml"))


@pytest.fixture(scope="session")
def rendered_cache() -> dict[tuple[Path, ...], Rendered]:
    return {}


@pytest.fixture(scope="session")
def rendered(rendered_cache: dict[tuple[Path, ...], Rendered]):
    """``rendered(*values_files)``: the chart rendered with those files (cached per session)."""

    def _render(*values_files: Path) -> Rendered:
        key = tuple(values_files)
        if key not in rendered_cache:
            rendered_cache[key] = render(values_files)
        return rendered_cache[key]

    return _render


@pytest.fixture(scope="session")
def default_install(rendered) -> Rendered:
    return rendered(CI_VALUES / "default-values.yaml")


@pytest.fixture(scope="session")
def gpu_install(rendered) -> Rendered:
    return rendered(CI_VALUES / "gpu-values.yaml")


@pytest.fixture(scope="session")
def external_redis_install(rendered) -> Rendered:
    return rendered(CI_VALUES / "multi-replica-external-redis-values.yaml")
