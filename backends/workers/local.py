"""Local vLLM-CPU workers for ``kvgate up``: their specs, ports, thread binds, and the supervisor.

:func:`local_supervisor` builds one :class:`WorkerSpec` per worker (:func:`build_specs`, pure)
and runs them under a :class:`~backends.workers.supervisor.WorkerSupervisor`: crashed workers
come back, and workers are drained before they stop. Worker ``i`` is named ``local-i``, listens on
``first_port + i`` (or on free ports) and binds its OpenMP threads to core ``i``
(``VLLM_CPU_OMP_THREADS_BIND``): without distinct binds, two workers both bind core 0. Logs go to
``logs_dir()/local-i.log``. (The e2e tests' unsupervised pool of the same workers is
``tests/support/local_workers.py``.)

Defaults follow the CPU recipe: FP8 KV cache where this CPU can serve it (``kv_cache_dtype=None``:
chosen by ``backends.host`` with the model's dtype, announced in one line through ``log``), prefix
caching, chunked prefill, eager mode (healthy in about 25 s instead of 70-115 s),
``max_model_len=2048``, 1 GiB of KV cache per worker.

Precise mode (``kv_events``: the gateway's ZMQ address, ``[routing.kv_events]``): every worker
gets ``--kv-events-config`` publishing to that address under the topic of its own origin
(``http://127.0.0.1:PORT``), which is how the gateway tells the workers' batches apart
(``gateway/scheduling/kv_subscriber.py``).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from backends import paths
from backends.commands import Log
from backends.workers.prepared import Runtime
from backends.workers.spec import WorkerSpec
from backends.workers.vllm_args import kv_events_json
from backends.workers.supervisor import VllmRunner, WorkerSupervisor
from backends.workers.dtypes import choose_for_model
from backends.workers.status import WorkerStatus

MAX_LOCAL_WORKERS = 2


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
                overrides: Mapping[str, Any] | None = None, kv_events: str | None = None) -> list[WorkerSpec]:
    """One CPU :class:`WorkerSpec` per port for ``runtime``'s model.

    ``binds`` default to :func:`thread_binds`; ``overrides`` replace any other spec field for
    every worker; ``kv_events`` (a ZMQ address) adds each worker's ``--kv-events-config`` (topic:
    its origin). Raises ``ValueError`` for an invalid field (named) or a bind count mismatch.
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
    specs = [dataclasses.replace(base, port=port, cpu_omp_threads_bind=bind)
             for port, bind in zip(ports, binds, strict=True)]
    if kv_events is None:
        return specs
    return [dataclasses.replace(spec, kv_events_config=kv_events_json(kv_events, topic=spec.origin)) for spec in specs]


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


class ProgressLog:
    """A supervisor listener printing local workers' progress (starting, healthy, failed) through ``log``."""

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


# Keyword-only worker spec options (as `kvgate up`'s flags), then the supervisor's own.
def local_supervisor(runtime: Runtime, count: int = 1, first_port: int | None = None, *,  # noqa: PLR0913
                     kv_cache_dtype: str | None = None, enforce_eager: bool = True, max_model_len: int | None = 2048,
                     cpu_kvcache_space_gib: int = 1, overrides: Mapping[str, Any] | None = None,
                     kv_events: str | None = None, log_dir: Path | None = None,
                     base_env: Mapping[str, str] | None = None, log: Log = print,
                     **supervisor_options: Any) -> WorkerSupervisor:
    """A :class:`WorkerSupervisor` of ``count`` local vLLM-CPU workers named ``local-i``.

    Specs from :func:`build_specs`; crashed workers are restarted (with backoff) and workers are
    drained before they stop. ``supervisor_options`` go to :class:`WorkerSupervisor` (policy,
    timeouts, listeners). ``kv_cache_dtype=None``: this host's choice (see :func:`host_dtypes`);
    ``overrides`` replace spec fields of every worker; ``kv_events`` as :func:`build_specs`.
    """
    if not 1 <= count <= MAX_LOCAL_WORKERS:
        raise ValueError(f"count: must be 1..{MAX_LOCAL_WORKERS}, got {count}")
    ports = list(range(first_port, first_port + count)) if first_port is not None else free_ports(count)
    kv_cache_dtype, overrides = host_dtypes(runtime, kv_cache_dtype, cpu_kvcache_space_gib=cpu_kvcache_space_gib,
                                            max_model_len=max_model_len, overrides=overrides, log=log)
    specs = build_specs(runtime, ports, kv_cache_dtype=kv_cache_dtype, enforce_eager=enforce_eager,
                        max_model_len=max_model_len, cpu_kvcache_space_gib=cpu_kvcache_space_gib,
                        overrides=overrides, kv_events=kv_events)
    listeners = [ProgressLog(log, count), *supervisor_options.pop("listeners", ())]
    return WorkerSupervisor([(f"local-{i}", spec) for i, spec in enumerate(specs)],
                            VllmRunner(runtime.worker_python, log_dir, dict(base_env) if base_env else None),
                            listeners=listeners, **supervisor_options)
