"""[io] Processes of an overhead run: pinned spawning, readiness, stopping, and what a process
tree costs (CPU seconds from ``/proc/<pid>/stat``, resident memory from ``/proc/<pid>/status``).

A target (a gateway) is one or more root processes; its cost is summed over each root and all of
its live descendants, thread by thread from ``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds on
the CPU, user and system together; ``stat``'s utime+stime count 10 ms ticks, too coarse for a
few hundred streams) with ``stat`` as the fallback (worker processes, Node's helpers, a CLI that re-executes itself). Every
child starts in its own session (process group) and is stopped by signalling the group: SIGTERM,
then SIGKILL after a grace period, so nothing outlives the run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def parse_cores(text: str) -> list[int]:
    """``"0"``, ``"0,2"``, ``"0-3"`` -> sorted core ids."""
    cores: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if "-" in part:
            low, high = part.split("-", 1)
            cores.update(range(int(low), int(high) + 1))
        elif part:
            cores.add(int(part))
    return sorted(cores)


def cores_arg(cores: Sequence[int]) -> str:
    return ",".join(str(core) for core in cores)


def _children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def tree(roots: Iterable[int]) -> list[int]:
    """The live pids of ``roots`` and all their descendants."""
    children = _children_map()
    seen: list[int] = []
    stack = [pid for pid in roots if Path(f"/proc/{pid}").exists()]
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.append(pid)
        stack.extend(children.get(pid, ()))
    return seen


def cpu_by_pid(pids: Iterable[int]) -> dict[int, float]:
    """utime + stime (all threads) of each pid, seconds (10 ms resolution)."""
    out: dict[int, float] = {}
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            out[pid] = (int(fields[11]) + int(fields[12])) / _TICK
    return out


def cpu_by_thread(pids: Iterable[int]) -> dict[tuple[int, int], float]:
    """Seconds on the CPU of every thread of ``pids`` (schedstat), keyed (pid, tid).

    Falls back to :func:`cpu_by_pid` (key (pid, 0)) where schedstat is not available.
    """
    out: dict[tuple[int, int], float] = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
            for tid in tids:
                with contextlib.suppress(OSError, ValueError, IndexError):
                    out[(pid, int(tid))] = int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0]) / 1e9
        except OSError:
            continue
        if not any(key[0] == pid for key in out):
            out.update({(pid, 0): value for value in cpu_by_pid([pid]).values()})
    return out


def rss_bytes(pids: Iterable[int]) -> int:
    """VmRSS summed over ``pids`` (shared pages of forked workers are counted once per process)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    break
    return total


@dataclass
class CpuWindow:
    """CPU seconds a process tree spends between :meth:`start` and :meth:`stop`.

    Per thread, so a worker or thread that appears during the window counts from zero and one
    that exits keeps what it had at the last sample (its time is not lost to the parent's
    ``cutime``).

    ``stat_seconds`` after :meth:`stop` is the same window from ``stat`` (10 ms ticks, but it
    keeps the time of threads that exited inside the window): a cross-check for the record.
    """

    roots: Sequence[int]
    before: dict[tuple[int, int], float] = field(default_factory=dict)
    last: dict[tuple[int, int], float] = field(default_factory=dict)
    stat_before: dict[int, float] = field(default_factory=dict)
    stat_last: dict[int, float] = field(default_factory=dict)
    stat_seconds: float = 0.0

    def start(self) -> None:
        pids = tree(self.roots)
        self.before = cpu_by_thread(pids)
        self.last = dict(self.before)
        self.stat_before = cpu_by_pid(pids)
        self.stat_last = dict(self.stat_before)

    def sample(self) -> None:
        pids = tree(self.roots)
        self.last.update(cpu_by_thread(pids))
        self.stat_last.update(cpu_by_pid(pids))

    def stop(self) -> float:
        self.sample()
        self.stat_seconds = sum(value - self.stat_before.get(pid, 0.0) for pid, value in self.stat_last.items())
        return sum(value - self.before.get(key, 0.0) for key, value in self.last.items())


@dataclass
class Proc:
    """A started child: its Popen, a name for messages and the log file its output goes to."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


def spawn(
    name: str,
    argv: Sequence[str],
    *,
    cores: Sequence[int] | None,
    log_dir: Path,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Proc:
    """Start ``argv`` pinned to ``cores`` (``taskset``; its exec keeps the pid) in its own session."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    command = ["taskset", "-c", cores_arg(cores), *argv] if cores else list(argv)
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(command)}\n".encode())
        out.flush()
        popen = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    return Proc(name, popen, log)


def stop(procs: Iterable[Proc], grace_s: float = 8.0) -> None:
    """SIGTERM each process group, wait up to ``grace_s``, then SIGKILL what is left."""
    procs = list(procs)
    for proc in procs:
        if proc.alive():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(max(0.1, deadline - time.monotonic()))
    for proc in procs:
        # the group may hold children even after its leader exited
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.popen.wait(5)
