"""Tests for backends.commands."""

from __future__ import annotations

import sys

import pytest

from backends.commands import child_env, run_logged
from backends.errors import PrepareError


def test_run_logged_streams_lines() -> None:
    lines: list[str] = []
    run_logged([sys.executable, "-c", "print('a'); import sys; print('b', file=sys.stderr)"],
               what="demo", log=lines.append, prefix="> ")
    assert lines == ["> a", "> b"]


def test_run_logged_failure_carries_the_output_tail() -> None:
    script = "for i in range(60): print(i)\nraise SystemExit(4)"
    with pytest.raises(PrepareError, match=r"^demo failed \(exit code 4\)") as info:
        run_logged([sys.executable, "-c", script], what="demo", log=lambda line: None)
    assert str(info.value).endswith("\n".join(str(i) for i in range(20, 60)))


def test_run_logged_missing_program() -> None:
    with pytest.raises(PrepareError, match="^demo: cannot run"):
        run_logged(["/nonexistent/program"], what="demo", log=lambda line: None)


def test_child_env_drops_python_location_and_adds_extra() -> None:
    env = child_env({"PATH": "/bin", "PYTHONPATH": "/x", "PYTHONHOME": "/y", "VIRTUAL_ENV": "/z"}, A="1")
    assert env == {"PATH": "/bin", "A": "1"}
