"""[io] The supervisor's status file, so that other ``kvgate workers`` commands can see it.

``kvgate workers up`` runs the supervisor in the foreground; ``status``, ``logs`` and ``down`` run
in other processes. :class:`StateFile` is a supervisor listener that rewrites one JSON file
(``paths.workers_state_file()``) after every change, atomically (write a temporary file, then
rename): ``{"supervisor_pid": PID, "updated_unix": T, "workers": [WorkerStatus.to_dict(), ...]}``.
:func:`read_state` reads it back (None when absent or unreadable); :func:`supervisor_alive`
tells a live supervisor from a stale file left by a killed one.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from backends.workers.process import pid_alive
from backends.workers.status import WorkerStatus


class StateFile:
    """A supervisor listener writing every worker's latest status to ``path``."""

    def __init__(self, path: Path, *, pid: int | None = None, wall_clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.pid = os.getpid() if pid is None else pid
        self._wall_clock = wall_clock
        self._rows: dict[str, dict[str, Any]] = {}

    async def worker_changed(self, status: WorkerStatus) -> None:
        self._rows[status.name] = status.to_dict()
        self.write()

    async def drain(self, status: WorkerStatus, timeout_s: float) -> None:
        """Nothing routes through a file."""

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        document = {"supervisor_pid": self.pid, "updated_unix": round(self._wall_clock(), 3),
                    "workers": list(self._rows.values())}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(document, indent=2) + "\n")
        os.replace(tmp, self.path)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


def read_state(path: Path) -> dict[str, Any] | None:
    """The status document at ``path``, or None."""
    try:
        document = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None


def supervisor_alive(state: dict[str, Any]) -> bool:
    """True if the process that wrote ``state`` still exists."""
    pid = state.get("supervisor_pid")
    return isinstance(pid, int) and pid > 0 and pid_alive(pid)
