"""Fake worker processes and time for supervisor tests (no vLLM, no sleeping).

``FakeRunner`` makes scripted ``FakeProcess`` objects (the ``backends.workers.supervisor.ManagedProcess``
protocol); ``FakeTime`` is a monotonic clock that sleeping advances; ``Recorder`` is a listener.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from pathlib import Path

from backends.errors import WorkerStartError
from backends.workers.lifecycle import Phase
from backends.workers.spec import WorkerSpec
from backends.workers.status import WorkerStatus

_pids = itertools.count(1000)


class FakeProcess:
    """A scripted process: ``healthy`` (ready at once), ``hang`` (never healthy), ``crash`` (exits
    right after start), ``unstartable`` (start raises)."""

    def __init__(self, name: str, behaviour: str) -> None:
        self.name, self.behaviour = name, behaviour
        self.log_path = Path(f"/nonexistent/{name}.log")
        self.pid: int | None = None
        self.returncode: int | None = None
        self.stops = 0
        self.stop_timeouts: list[float] = []
        self.stop_gate: asyncio.Event | None = None  # when set, stop() waits for it (a slow group)
        self._exited = asyncio.Event()

    async def start(self) -> None:
        if self.behaviour == "unstartable":
            raise WorkerStartError(f"{self.name}: cannot start 'python': No such file")
        self.pid = next(_pids)
        if self.behaviour == "crash":
            self.exit(1)

    async def wait_healthy(self, timeout_s: float) -> None:
        if self.behaviour == "hang":
            await self._exited.wait()
        if self.returncode is not None:
            raise WorkerStartError(f"{self.name} exited with code {self.returncode} before it became healthy")

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode

    async def stop(self, timeout_s: float) -> int | None:
        self.stops += 1
        self.stop_timeouts.append(timeout_s)
        if self.stop_gate is not None:
            await self.stop_gate.wait()
        if self.returncode is None:
            self.exit(-15)
        return self.returncode

    def stop_sync(self, timeout_s: float) -> None:
        if self.returncode is None:
            self.exit(-15)

    def exit(self, code: int) -> None:
        self.returncode = code
        self._exited.set()

    def log_tail(self, lines: int = 40) -> str:
        return "INFO fake log line"


class FakeRunner:
    def __init__(self, behaviours: dict[str, Sequence[str]] | None = None) -> None:
        self.behaviours = {name: list(b) for name, b in (behaviours or {}).items()}
        self.created: dict[str, list[FakeProcess]] = {}

    def create(self, name: str, spec: WorkerSpec) -> FakeProcess:
        queue = self.behaviours.get(name) or []
        behaviour = queue.pop(0) if len(queue) > 1 else (queue[0] if queue else "healthy")
        process = FakeProcess(name, behaviour)
        self.created.setdefault(name, []).append(process)
        return process


class FakeTime:
    """Monotonic time that sleeping advances; sleeps of ``block_from`` seconds or more never end."""

    def __init__(self, block_from: float = float("inf")) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []
        self.block_from = block_from

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        if seconds >= self.block_from:
            await asyncio.Event().wait()
        self.now += seconds
        await asyncio.sleep(0)


class Recorder:
    """A listener recording (name, phase) and drain calls; ``drain`` waits for ``release``."""

    def __init__(self, *, hold_drain: bool = False) -> None:
        self.seen: list[tuple[str, Phase]] = []
        self.drains: list[str] = []
        self.release = asyncio.Event()
        if not hold_drain:
            self.release.set()

    async def worker_changed(self, status: WorkerStatus) -> None:
        self.seen.append((status.name, status.phase))

    async def drain(self, status: WorkerStatus, timeout_s: float) -> None:
        self.drains.append(status.name)
        await self.release.wait()

    def phases(self, name: str) -> list[Phase]:
        return [phase for n, phase in self.seen if n == name]


def worker_spec(port: int, model: str = "/models/m", served: str = "m") -> WorkerSpec:
    """A valid CPU spec on ``port``."""
    return WorkerSpec(model=model, served_model_name=served, port=port, cpu_kvcache_space_gib=1)
