"""ruff over ``gateway/`` and ``backends/``: the rules and thresholds of ``[tool.ruff.lint]`` in pyproject.toml.

Only pyflakes, syntax/runtime errors and the size of a function are checked (cyclomatic
complexity, branches, statements, arguments); no style rules. A justified exception is a
``# noqa: RULE`` on the line with a comment above it saying why.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing() -> None:
    try:
        import ruff  # noqa: F401
    except ImportError:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "gateway", "backends"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, f"ruff check gateway backends:\n{result.stdout}{result.stderr}"
