"""``LocalWorkerPool``: one or two embedded vLLM-CPU workers, started and stopped together.

The pool is an async context manager. On enter it builds one :class:`WorkerSpec` per worker
(:func:`build_specs`, pure), starts every process concurrently and waits until all answer
``/health``; on exit, and on any failure or cancellation during start-up, it stops every
process group. Worker ``i`` is named ``local-i``, listens on ``first_port + i`` (or on free
ports) and binds its OpenMP threads to core ``i`` (``VLLM_CPU_OMP_THREADS_BIND``): without
distinct binds, two workers both bind core 0. Logs go to ``logs_dir()/local-i.log``.

:func:`local_supervisor` runs the same workers under a :class:`~backends.workers.supervisor.WorkerSupervisor`
instead (``kvgate up``): crashed workers come back, and workers are drained before they stop.

Defaults follow the CPU recipe: FP8 KV cache where this CPU can serve it (``kv_cache_dtype=None``:
chosen by ``backends.host`` with the model's dtype, announced in one line through ``log``), prefix
caching, chunked prefill, eager mode (healthy in about 25 s instead of 70-115 s),
``max_model_len=2048``, 1 GiB of KV cache per worker.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from backends import paths
from backends.commands import Log
from backends.workers.process import WorkerProcess
from backends.workers.prepared import Runtime
from backends.workers.spec import WorkerSpec
from backends.workers.supervisor import VllmRunner, WorkerSupervisor
from backends.workers.dtypes import choose_for_model
from backends.workers.status import WorkerStatus

MAX_LOCAL_WORKERS = 2


@dataclass(frozen=True, slots=True)
class LocalWorker:
    """A started local worker: its name (``local-0``), spec and process."""

    name: str
    spec: WorkerSpec
    process: WorkerProcess

    @property
    def base_url(self) -> str:
        """OpenAI base URL, e.g. ``http://127.0.0.1:8001/v1``."""
        return self.spec.base_url

    @property
    def origin(self) -> str:
        """``http://host:port``, where ``/health`` and ``/metrics`` live."""
        return self.spec.origin


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct TCP ports free on ``host`` right now (the OS picks them).

    Sockets are held open until all are chosen, so the ports differ; another process may still
    take one before the worker binds it.
    """
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def thread_binds(count: int, cpu_count: int) -> list[str]:
    """One core per worker: ``["0"]``, ``["0", "1"]`` ...; wraps around when cores run out."""
    return [str(i % max(cpu_count, 1)) for i in range(count)]


def build_specs(runtime: Runtime, ports: Sequence[int], *, kv_cache_dtype: str = "fp8",
                enforce_eager: bool = True, max_model_len: int | None = 2048,
                cpu_kvcache_space_gib: int = 1, binds: Sequence[str] | None = None,
                overrides: Mapping[str, Any] | None = None) -> list[WorkerSpec]:
    """One CPU :class:`WorkerSpec` per port for ``runtime``'s model.

    ``binds`` default to :func:`thread_binds`; ``overrides`` replace any other spec field for
    every worker. Raises ``ValueError`` for an invalid field (named) or a bind count mismatch.
    """
    binds = list(binds) if binds is not None else thread_binds(len(ports), os.cpu_count() or 1)
    if len(binds) != len(ports):
        raise ValueError(f"binds: {len(binds)} given for {len(ports)} workers")
    base = WorkerSpec(model=str(runtime.model_dir), served_model_name=runtime.served_model_name,
                      port=ports[0], kv_cache_dtype=kv_cache_dtype, max_model_len=max_model_len,
                      enforce_eager=enforce_eager, device="cpu",
                      cpu_kvcache_space_gib=cpu_kvcache_space_gib, launcher="module")
    fields = {f.name for f in dataclasses.fields(WorkerSpec)}
    unknown = set(overrides or {}) - fields
    if unknown:
        raise ValueError(f"overrides: unknown WorkerSpec field(s) {', '.join(sorted(unknown))}")
    base = dataclasses.replace(base, **dict(overrides or {}))
    return [dataclasses.replace(base, port=port, cpu_omp_threads_bind=bind)
            for port, bind in zip(ports, binds, strict=True)]


def host_dtypes(runtime: Runtime, kv_cache_dtype: str | None, *, cpu_kvcache_space_gib: int = 1,
                max_model_len: int | None = 2048, overrides: Mapping[str, Any] | None = None,
                log: Log | None = None) -> tuple[str, dict[str, Any]]:
    """``(kv_cache_dtype, overrides)`` for ``runtime``'s workers on this host (``backends.host``).

    ``None`` chooses (FP8 where it runs, else the model's dtype) and ``log``s the one-line notice
    with the planned capacity; an explicit dtype is checked (``ValueError`` with the reason when
    this host cannot serve it). The model ``dtype`` and the reason go into the overrides; a
    ``dtype`` the caller set there wins and is said so in the notice.
    """
    chosen = choose_for_model(runtime.model_dir, kv_cache_dtype, cpu_kvcache_space_gib=cpu_kvcache_space_gib,
                              max_model_len=max_model_len, dtype=(overrides or {}).get("dtype"))
    if log is not None:
        log(chosen.notice)
    fields = {"dtype": chosen.choice.dtype, "dtype_reason": chosen.choice.reason, **dict(overrides or {})}
    return chosen.choice.kv_cache_dtype, fields


class LocalWorkerPool:
    """Async context manager running ``count`` local vLLM-CPU workers for a prepared runtime.

    ``first_port=None`` picks free ports. ``healthy_timeout_s`` bounds start-up (seconds, all
    workers together); ``stop_timeout_s`` is the SIGTERM grace before SIGKILL. Raises
    :class:`backends.errors.WorkerStartError` from ``__aenter__`` after stopping every worker.
    """

    def __init__(self, runtime: Runtime, count: int = 1, first_port: int | None = None, *,
                 kv_cache_dtype: str | None = None, enforce_eager: bool = True,
                 max_model_len: int | None = 2048, cpu_kvcache_space_gib: int = 1,
                 binds: Sequence[str] | None = None, overrides: Mapping[str, Any] | None = None,
                 healthy_timeout_s: float = 300.0, stop_timeout_s: float = 15.0,
                 log_dir: Path | None = None, base_env: Mapping[str, str] | None = None,
                 log: Log = print) -> None:
        if not 1 <= count <= MAX_LOCAL_WORKERS:
            raise ValueError(f"count: must be 1..{MAX_LOCAL_WORKERS}, got {count}")
        ports = (list(range(first_port, first_port + count)) if first_port is not None
                 else free_ports(count))
        kv_cache_dtype, overrides = host_dtypes(runtime, kv_cache_dtype, cpu_kvcache_space_gib=cpu_kvcache_space_gib,
                                                max_model_len=max_model_len, overrides=overrides, log=log)
        self.specs = build_specs(runtime, ports, kv_cache_dtype=kv_cache_dtype,
                                 enforce_eager=enforce_eager, max_model_len=max_model_len,
                                 cpu_kvcache_space_gib=cpu_kvcache_space_gib, binds=binds,
                                 overrides=overrides)
        log_dir = log_dir if log_dir is not None else paths.logs_dir()
        self.workers: list[LocalWorker] = []
        for i, spec in enumerate(self.specs):
            name = f"local-{i}"
            process = WorkerProcess.for_spec(spec, runtime.worker_python, log_dir / f"{name}.log",
                                             base_env=base_env, name=name)
            self.workers.append(LocalWorker(name=name, spec=spec, process=process))
        self.healthy_timeout_s = healthy_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._log = log

    async def __aenter__(self) -> LocalWorkerPool:
        atexit.register(self.stop_sync)
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start every worker and wait until all are healthy (prefer ``async with``)."""
        started = time.monotonic()
        for worker in self.workers:
            self._log(f"{worker.name}: starting on {worker.origin} (log {worker.process.log_path})")
            await worker.process.start()
        waits = [asyncio.create_task(w.process.wait_healthy(self.healthy_timeout_s))
                 for w in self.workers]
        try:
            await asyncio.gather(*waits)
        except BaseException:
            for task in waits:
                task.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
            raise
        self._log(f"{len(self.workers)} worker(s) healthy after {time.monotonic() - started:.1f} s")

    async def stop(self) -> None:
        """Stop every worker's process group (idempotent; SIGKILL after ``stop_timeout_s``)."""
        try:
            await asyncio.gather(*(w.process.stop(self.stop_timeout_s) for w in self.workers))
        except BaseException:
            self.stop_sync()
            raise
        finally:
            atexit.unregister(self.stop_sync)

    def stop_sync(self) -> None:
        """Blocking stop of every worker, for atexit and signal handlers."""
        for worker in self.workers:
            worker.process.stop_sync(self.stop_timeout_s)


class ProgressLog:
    """A supervisor listener printing local workers' progress in ``LocalWorkerPool``'s words."""

    def __init__(self, log: Log, count: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._log, self._count, self._clock = log, count, clock
        self._started = clock()
        self._ready: set[str] = set()
        self._announced = False

    async def worker_changed(self, status: WorkerStatus) -> None:
        phase = status.phase.value
        if phase == "launching":
            again = f" (restart {status.restarts})" if status.restarts else ""
            self._log(f"{status.name}: starting on {status.spec.origin}{again} (log "
                      f"{paths.logs_dir() / (status.name + '.log')})")
        elif phase == "ready":
            self._ready.add(status.name)
            if status.restarts:
                self._log(f"{status.name}: healthy again (restart {status.restarts})")
            elif len(self._ready) == self._count and not self._announced:
                self._announced = True
                self._log(f"{self._count} worker(s) healthy after {self._clock() - self._started:.1f} s")
        elif phase == "failed":
            retry = "gave up" if status.gave_up else f"restarting in {status.retry_in_s:.0f} s"
            self._log(f"{status.name}: {status.last_error}; {retry}")

    async def drain(self, status: WorkerStatus, timeout_s: float) -> None:
        """Nothing routes through a log."""


def local_supervisor(runtime: Runtime, count: int = 1, first_port: int | None = None, *,
                     kv_cache_dtype: str | None = None, enforce_eager: bool = True, max_model_len: int | None = 2048,
                     cpu_kvcache_space_gib: int = 1, overrides: Mapping[str, Any] | None = None,
                     log_dir: Path | None = None,
                     base_env: Mapping[str, str] | None = None, log: Log = print,
                     **supervisor_options: Any) -> WorkerSupervisor:
    """A :class:`WorkerSupervisor` of ``count`` local vLLM-CPU workers named ``local-i``.

    Same specs, ports, binds and logs as :class:`LocalWorkerPool`, but crashed workers are
    restarted (with backoff) and workers are drained before they stop. ``supervisor_options``
    go to :class:`WorkerSupervisor` (policy, timeouts, listeners). ``kv_cache_dtype`` and
    ``overrides`` as :class:`LocalWorkerPool` (None: this host's choice, see :func:`host_dtypes`).
    """
    if not 1 <= count <= MAX_LOCAL_WORKERS:
        raise ValueError(f"count: must be 1..{MAX_LOCAL_WORKERS}, got {count}")
    ports = list(range(first_port, first_port + count)) if first_port is not None else free_ports(count)
    kv_cache_dtype, overrides = host_dtypes(runtime, kv_cache_dtype, cpu_kvcache_space_gib=cpu_kvcache_space_gib,
                                            max_model_len=max_model_len, overrides=overrides, log=log)
    specs = build_specs(runtime, ports, kv_cache_dtype=kv_cache_dtype, enforce_eager=enforce_eager,
                        max_model_len=max_model_len, cpu_kvcache_space_gib=cpu_kvcache_space_gib,
                        overrides=overrides)
    listeners = [ProgressLog(log, count), *supervisor_options.pop("listeners", ())]
    return WorkerSupervisor([(f"local-{i}", spec) for i, spec in enumerate(specs)],
                            VllmRunner(runtime.worker_python, log_dir, dict(base_env) if base_env else None),
                            listeners=listeners, **supervisor_options)
