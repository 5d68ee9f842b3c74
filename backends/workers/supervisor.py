"""[io] The worker supervisor: runs ``backends.workers.lifecycle`` for each worker against real processes.

One actor per worker consumes events from a queue, applies the pure ``step`` and performs the
actions it returns: SPAWN starts a process (``ProcessRunner``; by default :class:`VllmRunner`,
one ``WorkerProcess`` in its own process group, log under ``logs_dir()``), then watches its
health (``/health``, bounded by ``healthy_timeout_s``) and its exit; KILL stops the group
(SIGTERM, SIGKILL after ``stop_timeout_s``); DRAIN asks every listener to drain the worker
(bounded by ``drain_timeout_s``); SCHEDULE_RETRY sleeps until the backoff ends. The outcome of
each comes back as an event tagged with the process generation.

When vLLM's API server exits on its own, the rest of its group (EngineCore, Worker: gigabytes)
may live on. The exit watcher reports ``Exited`` at once (so the endpoint is withdrawn), then
stops the whole group (SIGTERM, SIGKILL after ``orphan_grace_s``); the next launch of that
worker waits until the old group is gone.

Listeners (:class:`WorkerListener`; the gateway's ``ManagedEndpoints``, the status file) get a
:class:`WorkerStatus` after every change of state, in order; a failing listener is logged and
never stops the supervisor. Each status carries the planned KV capacity (from the spec) and,
once ready, the capacity the worker reports.

Time: ``clock`` (monotonic seconds) and ``sleep`` are injected; tests run with fakes.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol

from backends import paths
from backends.errors import BackendError, WorkerStartError
from backends.kv.planner import KvPlan
from backends.kv.report import ReportedCapacity
from backends.workers.lifecycle import (
    Action, Drain, Drained, Event, Exited, Healthy, HealthTimeout, Phase, RestartPolicy, RetryDue, Spawned,
    SpawnFailed, Start, WorkerState, step,
)
from backends.workers.process import WorkerProcess, failure_cause, failure_report
from backends.workers.spec import WorkerSpec
from backends.workers.capacity import plan_for_spec, probe_worker
from backends.workers.status import WorkerStatus

log = logging.getLogger("kvgate.workers")

AT_REST = (Phase.PLANNED, Phase.STOPPED, Phase.FAILED)


class UnknownWorkerError(BackendError, KeyError):
    """No worker of that name."""


class ManagedProcess(Protocol):
    """What the supervisor needs of a process (``WorkerProcess`` is one)."""

    log_path: Path

    @property
    def pid(self) -> int | None: ...
    @property
    def returncode(self) -> int | None: ...
    async def start(self) -> None: ...
    async def wait_healthy(self, timeout_s: float) -> None: ...
    async def wait(self) -> int: ...
    async def stop(self, timeout_s: float) -> int | None: ...
    def stop_sync(self, timeout_s: float) -> None: ...
    def log_tail(self, lines: int = 40) -> str: ...


class ProcessRunner(Protocol):
    """Makes a new, unstarted process for a worker (one per launch)."""

    def create(self, name: str, spec: WorkerSpec) -> ManagedProcess: ...


class WorkerListener(Protocol):
    async def worker_changed(self, status: WorkerStatus) -> None:
        """Called after every change of a worker's state."""

    async def drain(self, status: WorkerStatus, timeout_s: float) -> None:
        """Stop routing new requests to the worker; return once its in-flight ones are done."""


class VllmRunner:
    """Real vLLM workers run by ``python`` (the worker venv's), logs in ``log_dir/NAME.log``."""

    def __init__(self, python: str | Path, log_dir: Path | None = None, base_env: dict[str, str] | None = None) -> None:
        self.python = python
        self.log_dir = log_dir if log_dir is not None else paths.logs_dir()
        self.base_env = base_env

    def create(self, name: str, spec: WorkerSpec) -> ManagedProcess:
        return WorkerProcess.for_spec(spec, self.python, self.log_dir / f"{name}.log", base_env=self.base_env, name=name)


Planner = Callable[[WorkerSpec], KvPlan | None]
CapacityProbe = Callable[[WorkerSpec, Path | None], Awaitable[ReportedCapacity | None]]


class _Worker:
    """One worker's actor: its state, its current process and its background tasks."""

    def __init__(self, sup: WorkerSupervisor, name: str, spec: WorkerSpec, planned: KvPlan | None) -> None:
        self.sup, self.name, self.spec, self.planned = sup, name, spec, planned
        self.state = WorkerState(since=sup.clock())
        self.process: ManagedProcess | None = None
        self.reported: ReportedCapacity | None = None
        self.events: asyncio.Queue[Event] = asyncio.Queue()
        self.tasks: set[asyncio.Future[None]] = set()
        self.reaping: asyncio.Future[None] | None = None

    def status(self) -> WorkerStatus:
        return WorkerStatus.of(self.name, self.spec, self.state, self.process, self.planned, self.reported,
                               now=self.sup.clock(), wall=self.sup.wall_clock())

    def post(self, event: Event) -> None:
        self.events.put_nowait(event)

    def spawn(self, coro: Awaitable[None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Future[None]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("worker %s: background task failed", self.name, exc_info=task.exception())

    async def run(self) -> None:
        while True:
            event = await self.events.get()
            new, actions = step(self.state, event, self.sup.clock(), self.sup.policy)
            if new == self.state and not actions:
                continue
            if new.phase is not self.state.phase:
                log.info("worker %s: %s -> %s%s", self.name, self.state.phase.value, new.phase.value,
                         f" ({new.last_error})" if new.last_error and new.phase is Phase.FAILED else "")
            if new.phase is Phase.LAUNCHING:
                self.reported = None
            self.state = new
            await self.sup.publish(self.status())
            for action in actions:
                self.spawn(self.perform(action, new))

    async def perform(self, action: Action, state: WorkerState) -> None:
        if action is Action.SPAWN:
            await self.launch(state.generation)
        elif action is Action.KILL:
            if self.process is not None:
                await self.process.stop(self.sup.stop_timeout_s)
        elif action is Action.DRAIN:
            await self.sup.drain_listeners(self.status())
            self.post(Drained(state.generation))
        elif action is Action.SCHEDULE_RETRY and state.retry_at is not None:
            await self.sup.sleep(max(state.retry_at - self.sup.clock(), 0.0))
            self.post(RetryDue())

    async def launch(self, generation: int) -> None:
        if self.reaping is not None:
            await self.reaping  # the previous process group is gone first (its memory, its port)
        process = self.sup.runner.create(self.name, self.spec)
        try:
            await process.start()
        except BackendError as exc:
            self.post(SpawnFailed(generation, str(exc)))
            return
        self.process = process
        self.reaping = self.spawn(self.watch_exit(process, generation))
        self.post(Spawned(generation))
        if self.state.phase is Phase.STOPPING and self.state.generation == generation:
            await process.stop(self.sup.stop_timeout_s)  # asked to stop while it was starting
            return
        try:
            await process.wait_healthy(self.sup.healthy_timeout_s)
        except WorkerStartError as exc:
            if process.returncode is None:
                self.post(HealthTimeout(generation, str(exc).splitlines()[0]))
            return
        try:
            reported = await self.sup.capacity_probe(self.spec, process.log_path)
        except Exception:  # the capacity is informative; a probe bug must not block readiness
            log.exception("worker %s: capacity probe failed", self.name)
            reported = None
        if self.state.generation == generation:
            self.reported = reported
        self.post(Healthy(generation))

    async def watch_exit(self, process: ManagedProcess, generation: int) -> None:
        """Report the leader's exit at once (the endpoint goes), then reap the rest of its group."""
        code = await process.wait()
        asked = self.state.phase is Phase.STOPPING
        cause = None if asked else await asyncio.to_thread(failure_cause, process.log_path)
        self.post(Exited(generation, code, cause))
        # An orphaned EngineCore has nothing left to serve: a short grace, then SIGKILL.
        await process.stop(self.sup.stop_timeout_s if asked else self.sup.orphan_grace_s)


class WorkerSupervisor:
    """Runs named workers, restarts them on crashes, drains them before they stop.

    Use as ``async with`` (start, wait until every worker is ready, stop everything on exit) or
    call :meth:`start`, :meth:`wait_ready` and :meth:`stop`. Not thread-safe: one event loop.
    """

    # Keyword-only: five timeouts plus the injected clock, wall clock, sleep, planner and probe (tests).
    def __init__(self, workers: Sequence[tuple[str, WorkerSpec]], runner: ProcessRunner, *,  # noqa: PLR0913
                 policy: RestartPolicy = RestartPolicy(), listeners: Sequence[WorkerListener] = (),
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, healthy_timeout_s: float = 300.0,
                 drain_timeout_s: float = 30.0, stop_timeout_s: float = 15.0, ready_timeout_s: float = 600.0,
                 orphan_grace_s: float = 3.0,
                 planner: Planner = plan_for_spec, capacity_probe: CapacityProbe = probe_worker) -> None:
        names = [name for name, _ in workers]
        if len(set(names)) != len(names):
            raise ValueError(f"workers: duplicate names in {names}")
        self.runner, self.policy, self.clock, self.wall_clock, self.sleep = runner, policy, clock, wall_clock, sleep
        self.healthy_timeout_s, self.drain_timeout_s = healthy_timeout_s, drain_timeout_s
        self.stop_timeout_s, self.ready_timeout_s, self.orphan_grace_s = stop_timeout_s, ready_timeout_s, orphan_grace_s
        self.capacity_probe = capacity_probe
        self.listeners: list[WorkerListener] = list(listeners)
        self._workers = {name: _Worker(self, name, spec, planner(spec)) for name, spec in workers}
        self._loops: list[asyncio.Task[None]] = []
        self._changed: asyncio.Condition | None = None

    # -- queries --------------------------------------------------------------------------
    def names(self) -> list[str]:
        return list(self._workers)

    def status(self, name: str) -> WorkerStatus:
        return self._worker(name).status()

    def statuses(self) -> list[WorkerStatus]:
        return [worker.status() for worker in self._workers.values()]

    def _worker(self, name: str) -> _Worker:
        try:
            return self._workers[name]
        except KeyError:
            raise UnknownWorkerError(f"no worker named {name!r}; workers: {', '.join(self._workers)}") from None

    # -- commands -------------------------------------------------------------------------
    async def subscribe(self, listener: WorkerListener) -> None:
        """Add a listener and replay every worker's current status to it."""
        self.listeners.append(listener)
        for status in self.statuses():
            await _call(listener.worker_changed(status), "worker_changed")

    async def start(self) -> None:
        """Start every worker (returns at once; see :meth:`wait_ready`)."""
        if not self._loops:
            self._changed = asyncio.Condition()
            self._loops = [asyncio.create_task(worker.run(), name=f"worker-{worker.name}")
                           for worker in self._workers.values()]
            atexit.register(self.stop_sync)
        for worker in self._workers.values():
            worker.post(Start())

    def start_worker(self, name: str) -> WorkerStatus:
        """Start one worker that is planned, stopped or failed (resets its crash history)."""
        self._worker(name).post(Start())
        return self.status(name)

    def restart(self, name: str) -> WorkerStatus:
        """Drain, stop and relaunch one worker (a restart, not a crash)."""
        self._worker(name).post(Drain("restart"))
        return self.status(name)

    def drain(self, name: str) -> WorkerStatus:
        """Drain and stop one worker; it stays stopped until started or restarted."""
        self._worker(name).post(Drain("stop"))
        return self.status(name)

    async def wait_for(self, name: str, predicate: Callable[[WorkerStatus], bool], timeout_s: float) -> WorkerStatus:
        """Wait until ``predicate(status)`` holds for worker ``name``; ``TimeoutError`` otherwise."""
        worker = self._worker(name)
        assert self._changed is not None, "start() first"
        async with asyncio.timeout(timeout_s), self._changed:
            await self._changed.wait_for(lambda: predicate(worker.status()))
        return worker.status()

    async def wait_ready(self, timeout_s: float | None = None, *, fail_fast: bool = True) -> None:
        """Wait until every worker is ready.

        Raises :class:`WorkerStartError` (with the failing worker's log tail) when one fails
        (``fail_fast``) or gives up, or when ``timeout_s`` (default ``ready_timeout_s``) passes.
        """
        def settled(status: WorkerStatus) -> bool:
            failed = status.phase is Phase.FAILED and (fail_fast or status.gave_up)
            return status.phase is Phase.READY or failed

        deadline = self.clock() + (self.ready_timeout_s if timeout_s is None else timeout_s)
        for name, worker in self._workers.items():
            try:
                status = await self.wait_for(name, settled, max(deadline - self.clock(), 0.0))
            except TimeoutError:
                raise self._start_error(worker, "not ready in time") from None
            if status.phase is not Phase.READY:
                raise self._start_error(worker, status.last_error or "failed")

    def _start_error(self, worker: _Worker, what: str) -> WorkerStartError:
        if worker.process is None:
            return WorkerStartError(f"worker {worker.name}: {what}")
        return WorkerStartError(failure_report(f"worker {worker.name}: {what}", worker.process.log_path))

    async def stop(self) -> None:
        """Drain and stop every worker, then end the actors. Idempotent."""
        if not self._loops:
            return
        try:
            for worker in self._workers.values():
                worker.post(Drain("stop"))
            budget = self.drain_timeout_s + self.stop_timeout_s + 10.0
            with contextlib.suppress(TimeoutError):
                for name in self._workers:
                    await self.wait_for(name, lambda s: s.phase in AT_REST and not s.retry_in_s, budget)
            reaping = [w.reaping for w in self._workers.values() if w.reaping is not None and not w.reaping.done()]
            if reaping:
                await asyncio.wait(reaping, timeout=self.stop_timeout_s + 10.0)
        finally:
            await self._end_actors()

    async def _end_actors(self) -> None:
        tasks = [*self._loops, *(t for w in self._workers.values() for t in w.tasks)]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loops = []
        self.stop_sync()
        atexit.unregister(self.stop_sync)

    def stop_sync(self) -> None:
        """Blocking stop of every process group (atexit, signal handlers, failed shutdowns)."""
        for worker in self._workers.values():
            if worker.process is not None:
                worker.process.stop_sync(self.stop_timeout_s)

    async def __aenter__(self) -> WorkerSupervisor:
        await self.start()
        try:
            await self.wait_ready()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    # -- listeners ------------------------------------------------------------------------
    async def publish(self, status: WorkerStatus) -> None:
        for listener in self.listeners:
            await _call(listener.worker_changed(status), "worker_changed")
        if self._changed is not None:
            async with self._changed:
                self._changed.notify_all()

    async def drain_listeners(self, status: WorkerStatus) -> None:
        """Every listener's ``drain``, bounded by ``drain_timeout_s`` (timed by the injected sleep)."""
        drains = asyncio.ensure_future(asyncio.gather(
            *(_call(listener.drain(status, self.drain_timeout_s), "drain") for listener in self.listeners)))
        timer = asyncio.ensure_future(self.sleep(self.drain_timeout_s))
        try:
            await asyncio.wait({drains, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not drains.done():
                log.warning("worker %s: in-flight requests still running after %g s; stopping it anyway",
                            status.name, self.drain_timeout_s)
            drains.cancel()
            timer.cancel()
            await asyncio.gather(drains, timer, return_exceptions=True)


async def _call(awaitable: Awaitable[None], what: str) -> None:
    try:
        await awaitable
    except Exception:  # a listener's bug must not stop the supervisor
        log.exception("worker listener %s failed", what)
