"""The published view of one supervised worker: :class:`WorkerStatus`, its JSON form and a table.

A status is an immutable snapshot built by the supervisor after every change of state; the
gateway's admin API and ``kvgate workers status`` show its :meth:`WorkerStatus.to_dict` form
(JSON: times as Unix seconds, KV capacity planned beside reported, with their relative error;
the KV and model dtypes in force and ``dtype_reason``, why ``backends.host`` chose them).
:func:`format_table` renders those dicts as the fixed-width table the CLI prints. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from backends.kv.planner import KvPlan
from backends.kv.report import ReportedCapacity
from backends.workers.lifecycle import Phase, WorkerState
from backends.workers.spec import WorkerSpec


class _Process(Protocol):
    @property
    def pid(self) -> int | None: ...
    @property
    def log_path(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """One worker as listeners, the admin API and the CLI see it."""

    name: str
    spec: WorkerSpec
    phase: Phase
    goal: str
    generation: int
    restarts: int
    pid: int | None
    since_unix: float
    retry_in_s: float | None
    gave_up: bool
    last_exit_code: int | None
    last_error: str | None
    log_path: str | None
    planned: KvPlan | None
    reported: ReportedCapacity | None

    @classmethod
    def of(cls, name: str, spec: WorkerSpec, state: WorkerState, process: _Process | None,
           planned: KvPlan | None, reported: ReportedCapacity | None, *, now: float, wall: float) -> WorkerStatus:
        """Snapshot ``state`` at monotonic time ``now`` (``wall``: the same instant in Unix time)."""
        retry = None if state.retry_at is None else max(state.retry_at - now, 0.0)
        running = state.phase not in (Phase.PLANNED, Phase.STOPPED, Phase.FAILED)
        return cls(name=name, spec=spec, phase=state.phase, goal=state.goal, generation=state.generation,
                   restarts=state.restarts, pid=process.pid if process is not None and running else None,
                   since_unix=wall - (now - state.since), retry_in_s=retry, gave_up=state.gave_up,
                   last_exit_code=state.last_exit_code, last_error=state.last_error,
                   log_path=str(process.log_path) if process is not None else None,
                   planned=planned, reported=reported)

    @property
    def base_url(self) -> str:
        return self.spec.base_url

    def kv_capacity(self) -> dict[str, Any]:
        """Planned vs reported KV tokens, and ``error`` = |planned - reported| / reported."""
        planned = self.planned.kv_cache_tokens if self.planned is not None else None
        reported = self.reported.kv_cache_tokens if self.reported is not None else None
        error = abs(planned - reported) / reported if planned is not None and reported else None
        return {"planned_tokens": planned, "reported_tokens": reported,
                "relative_error": None if error is None else round(error, 4),
                "planned": self.planned.to_dict() if self.planned is not None else None,
                "reported": self.reported.to_dict() if self.reported is not None else None}

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "phase": self.phase.value, "goal": self.goal, "url": self.base_url,
            "model": self.spec.served_model_name, "kv_cache_dtype": self.spec.kv_cache_dtype,
            "dtype": self.spec.dtype or "auto", "dtype_reason": self.spec.dtype_reason,
            "device": self.spec.device, "pid": self.pid, "generation": self.generation,
            "restarts": self.restarts, "since_unix": round(self.since_unix, 3),
            "retry_in_s": None if self.retry_in_s is None else round(self.retry_in_s, 3),
            "gave_up": self.gave_up, "last_exit_code": self.last_exit_code, "last_error": self.last_error,
            "log_path": self.log_path, "kv_capacity": self.kv_capacity(),
        }


_COLUMNS = (("NAME", "name"), ("PHASE", "phase"), ("PID", "pid"), ("URL", "url"), ("KV", "kv_cache_dtype"),
            ("RESTARTS", "restarts"), ("KV TOKENS PLANNED", "planned"), ("REPORTED", "reported"),
            ("ERROR", "error"))


def _cells(row: dict[str, Any]) -> dict[str, str]:
    capacity = row.get("kv_capacity") or {}
    error = capacity.get("relative_error")
    cells = {key: "-" if row.get(key) is None else str(row[key]) for _, key in _COLUMNS}
    cells["planned"] = f"{capacity['planned_tokens']:,}" if capacity.get("planned_tokens") is not None else "-"
    cells["reported"] = f"{capacity['reported_tokens']:,}" if capacity.get("reported_tokens") is not None else "-"
    cells["error"] = f"{error * 100:.1f}%" if error is not None else "-"
    if row.get("phase") == "failed":
        cells["phase"] = "failed (gave up)" if row.get("gave_up") else f"failed (retry in {row.get('retry_in_s') or 0:.0f} s)"
    return cells


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A fixed-width table of ``WorkerStatus.to_dict()`` rows, one line per worker."""
    cells = [_cells(row) for row in rows]
    widths = {key: max([len(title)] + [len(c[key]) for c in cells]) for title, key in _COLUMNS}
    lines = ["  ".join(title.ljust(widths[key]) for title, key in _COLUMNS).rstrip()]
    lines += ["  ".join(c[key].ljust(widths[key]) for _, key in _COLUMNS).rstrip() for c in cells]
    return "\n".join(lines)
