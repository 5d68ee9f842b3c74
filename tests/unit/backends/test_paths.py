"""Tests for backends.paths."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends import paths


def test_home_from_env(tmp_path: Path) -> None:
    assert paths.kvgate_home({"KVGATE_HOME": str(tmp_path)}) == tmp_path


@pytest.mark.parametrize("env", [{}, {"KVGATE_HOME": ""}, {"KVGATE_HOME": "  "}])
def test_home_default(env: dict[str, str]) -> None:
    assert paths.kvgate_home(env) == Path.home() / ".cache" / "kvgate"


def test_layout(tmp_path: Path) -> None:
    assert paths.worker_venv_dir(tmp_path) == tmp_path / "worker-venv"
    assert paths.models_dir(tmp_path) == tmp_path / "models"
    assert paths.logs_dir(tmp_path) == tmp_path / "logs"


def test_default_layout_follows_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVGATE_HOME", str(tmp_path))
    assert paths.logs_dir() == tmp_path / "logs"
