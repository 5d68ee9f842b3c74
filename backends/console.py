"""What a backends command prints: progress lines on stderr and a refused or failed run as one line.

Shared by the ``kvgate`` subcommands of ``backends/cli.py`` and ``backends/workers/cli.py``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from backends.errors import BackendError, PlanError

Run = Callable[[argparse.Namespace], int]


def say(line: str) -> None:
    print(f"[kvgate] {line}", file=sys.stderr, flush=True)


def guarded(run: Run) -> Run:
    """Print a backends error as one line: exit 2 for refused input, 1 otherwise."""
    def guarded(args: argparse.Namespace) -> int:
        try:
            return run(args)
        except (PlanError, ValueError) as error:
            print(f"kvgate: {error}", file=sys.stderr)
            return 2
        except BackendError as error:
            print(f"kvgate: {error}", file=sys.stderr)
            return 1
    return guarded
