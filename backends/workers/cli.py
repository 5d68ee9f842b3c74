"""[io] ``kvgate workers``: run supervised vLLM workers in the foreground, and inspect or stop them.

    kvgate workers up [--count N] [--config FILE] [--kv-events ADDR] ...   run supervised vLLM workers (foreground)
    kvgate workers status [--json]                      what `workers up` runs, from its status file
    kvgate workers logs NAME [-n 40] [--follow]         a worker's log
    kvgate workers down                                 stop `workers up` (drains, then stops)

:func:`add_workers` registers them (called by ``backends/cli.py``); exit codes as there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from backends import paths
from backends.console import guarded as _guarded, say as _say
from backends.errors import BackendError
from backends.workers.spec import KV_CACHE_DTYPES


def _workers_up(args: argparse.Namespace) -> int:
    return asyncio.run(_workers_up_async(args))


def _worker_specs(args: argparse.Namespace, model: str, served: str, facts: Any, gpus: list[Any]) -> list[tuple[str, Any]]:
    from backends.host import kv_dtype_support
    from backends.workers.dtypes import choose_for_model
    from backends.workers.workers_file import load_workers_file, plan_workers

    document = load_workers_file(args.config) if args.config else None
    chosen = choose_for_model(model, args.kv_cache_dtype, facts=facts, max_model_len=args.max_model_len,
                              cpu_kvcache_space_gib=None if gpus else args.cpu_kvcache_space_gib)
    _say(chosen.notice)
    base: dict[str, Any] = {"model": model, "served_model_name": served,
                            "kv_cache_dtype": chosen.choice.kv_cache_dtype, "dtype": chosen.choice.dtype,
                            "dtype_reason": chosen.choice.reason,
                            "max_model_len": args.max_model_len, "enforce_eager": args.enforce_eager}
    if args.tensor_parallel_size != 1:
        base["tensor_parallel_size"] = args.tensor_parallel_size
    if gpus:
        base["launcher"] = "vllm-serve"
    specs = plan_workers(base, document, count=args.count, gpus=gpus, cpu_count=os.cpu_count() or 1,
                         first_port=args.first_port, cpu_kvcache_space_gib=args.cpu_kvcache_space_gib)
    for name, spec in specs:  # a [[workers]] table may ask for a dtype this host cannot serve
        support = kv_dtype_support(facts)[spec.kv_cache_dtype]
        if not support.ok:
            raise ValueError(f"workers.{name}.kv_cache_dtype {spec.kv_cache_dtype}: {support.reason}")
    return _with_kv_events(specs, args.kv_events)


def _with_kv_events(specs: list[tuple[str, Any]], address: str | None) -> list[tuple[str, Any]]:
    """``--kv-events ADDRESS``: each worker publishes its KV events to the gateway's
    ``routing.kv_events.bind`` at ADDRESS (topic: the worker's origin, as ``kvgate up`` does); a
    ``[[workers]]`` table's own ``kv_events_config`` wins. Raises ``ValueError`` for an address
    vLLM would bind instead of connecting to (its rule: ``*`` or ``::`` in it, ``ipc://`` or
    ``inproc://``), a ``0.0.0.0`` host, or one that is not ``tcp://HOST:PORT``."""
    import dataclasses
    from urllib.parse import urlsplit

    from backends.workers.vllm_args import kv_events_json

    if address is None:
        return specs
    binds = "*" in address or "::" in address or address.startswith(("ipc://", "inproc://"))
    try:
        parts = urlsplit(address)
        concrete = parts.scheme == "tcp" and parts.hostname not in (None, "0.0.0.0") and parts.port is not None
    except ValueError:
        concrete = False
    if binds or not concrete:
        raise ValueError(f"--kv-events {address}: must be the gateway's concrete tcp://host:port address "
                         "(vLLM binds wildcard, '::' and ipc:// addresses instead of connecting)")
    return [(name, spec if spec.kv_events_config else
             dataclasses.replace(spec, kv_events_config=kv_events_json(address, topic=spec.origin)))
            for name, spec in specs]


async def _workers_up_async(args: argparse.Namespace) -> int:
    from backends.workers.prepared import prepare_runtime
    from backends.workers.state_file import StateFile
    from backends.workers.supervisor import VllmRunner, WorkerSupervisor

    from backends.host import kv_dtype_support
    from backends.host_report import host_facts

    facts, gpus = host_facts(args.device)
    if args.device == "gpu" and not gpus:
        raise BackendError("--device gpu: nvidia-smi found no GPU")
    if args.kv_cache_dtype is not None and not kv_dtype_support(facts)[args.kv_cache_dtype].ok:
        raise ValueError(f"--kv-cache-dtype {args.kv_cache_dtype}: {kv_dtype_support(facts)[args.kv_cache_dtype].reason}")
    if args.model and args.worker_python:
        python, model, served = Path(args.worker_python), args.model, args.served_model_name or Path(args.model).name
    else:
        runtime = await asyncio.to_thread(prepare_runtime, log=_say)
        python, model, served = runtime.worker_python, str(runtime.model_dir), runtime.served_model_name
    specs = _worker_specs(args, model, served, facts, gpus)
    state = StateFile(paths.workers_state_file())
    supervisor = WorkerSupervisor(specs, VllmRunner(python), listeners=[state, _Announcer()])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await supervisor.start()
        _say(f"supervising {len(specs)} worker(s); Ctrl-C or `kvgate workers down` drains and stops them")
        await stop.wait()
        _say("stopping: draining, then stopping every worker")
    finally:
        await supervisor.stop()
        state.remove()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    return 0


class _Announcer:
    """Prints each worker's phase changes."""

    async def worker_changed(self, status: Any) -> None:
        extra = ""
        if status.phase.value == "ready":
            cap = status.kv_capacity()
            extra = (f" at {status.base_url} (KV tokens planned {cap['planned_tokens'] or '-'}, "
                     f"reported {cap['reported_tokens'] or '-'})")
        elif status.phase.value == "failed":
            extra = f": {status.last_error}" + ("" if status.gave_up else f"; retry in {status.retry_in_s:.0f} s")
        _say(f"worker {status.name}: {status.phase.value}{extra}")

    async def drain(self, status: Any, timeout_s: float) -> None:
        """Nothing to drain."""


def _read_state(required: bool = True) -> dict[str, Any] | None:
    from backends.workers.state_file import read_state

    state = read_state(paths.workers_state_file())
    if state is None and required:
        raise BackendError(f"no workers are running (no {paths.workers_state_file()}); start them with `kvgate workers up`")
    return state


def _workers_status(args: argparse.Namespace) -> int:
    from backends.workers.state_file import supervisor_alive
    from backends.workers.status import format_table

    state = _read_state()
    assert state is not None
    alive = supervisor_alive(state)
    if args.json:
        print(json.dumps({**state, "supervisor_alive": alive}, indent=2))
        return 0
    print(format_table(state.get("workers", [])))
    for row in state.get("workers", []):
        if row.get("dtype_reason"):
            print(f"{row['name']}: --kv-cache-dtype {row.get('kv_cache_dtype')} --dtype {row.get('dtype') or 'auto'}: "
                  f"{row['dtype_reason']}")
    if not alive:
        print(f"(supervisor pid {state.get('supervisor_pid')} is not running: last known state)")
    return 0


def _workers_logs(args: argparse.Namespace) -> int:
    from backends.workers.process import tail_lines

    state = _read_state(required=False) or {}
    row = next((w for w in state.get("workers", []) if w.get("name") == args.name), {})
    path = Path(row.get("log_path") or paths.logs_dir() / f"{args.name}.log")
    if not path.exists():
        raise BackendError(f"no log for worker {args.name!r} at {path}")
    print(tail_lines(path, args.lines), flush=True)
    if args.follow:
        with contextlib.suppress(KeyboardInterrupt), open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            while True:
                chunk = f.read()
                if chunk:
                    sys.stdout.write(chunk.decode(errors="replace"))
                    sys.stdout.flush()
                else:
                    time.sleep(0.5)
    return 0


def _workers_down(args: argparse.Namespace) -> int:
    from backends.workers.state_file import supervisor_alive

    state = _read_state()
    assert state is not None
    pid = state.get("supervisor_pid")
    if not isinstance(pid, int) or not supervisor_alive(state):
        _say(f"supervisor pid {pid} is not running; nothing to stop")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + args.timeout
    while supervisor_alive(state) and time.monotonic() < deadline:
        time.sleep(0.2)
    if supervisor_alive(state):
        raise BackendError(f"supervisor pid {pid} still running after {args.timeout:g} s")
    _say(f"supervisor pid {pid} drained and stopped its workers")
    return 0


def add_workers(subparsers: Any) -> None:
    """Add ``workers`` (up, status, logs, down) to ``kvgate``'s subparsers."""
    workers = subparsers.add_parser("workers", help="supervised vLLM workers: up, status, logs, down")
    actions = workers.add_subparsers(dest="workers_command", required=True)
    up = actions.add_parser("up", help="run supervised workers in the foreground (restart on crash)")
    up.add_argument("--count", type=int, default=1, help="workers (default 1; a --config file's [[workers]] win)")
    up.add_argument("--config", help="TOML file: [defaults] and [[workers]] (WorkerSpec fields)")
    up.add_argument("--kv-cache-dtype", default=None, choices=KV_CACHE_DTYPES,
                    help="default: fp8 (E4M3) where this host can serve it, else auto (the model's dtype)")
    up.add_argument("--first-port", type=int, default=8001, help="port of the first worker (default 8001)")
    up.add_argument("--max-model-len", type=int, default=2048)
    up.add_argument("--cpu-kvcache-space-gib", type=int, default=1, help="VLLM_CPU_KVCACHE_SPACE on CPU hosts")
    up.add_argument("--tensor-parallel-size", type=int, default=1, help="GPUs per worker (GPU hosts)")
    up.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, default=True)
    up.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto", help="auto: GPUs if nvidia-smi sees any")
    up.add_argument("--model", help="model directory or id (with --worker-python; default: prepared SmolLM2)")
    up.add_argument("--served-model-name")
    up.add_argument("--worker-python", help="python of a venv with vLLM (default: the prepared worker venv)")
    up.add_argument("--kv-events", metavar="ADDRESS",
                    help="precise mode: publish KV events to the gateway's routing.kv_events.bind at this "
                         "tcp://host:port (e.g. tcp://127.0.0.1:5557; topic: each worker's origin)")
    up.set_defaults(run=_guarded(_workers_up))
    status = actions.add_parser("status", help="workers run by `kvgate workers up`")
    status.add_argument("--json", action="store_true")
    status.set_defaults(run=_guarded(_workers_status))
    logs = actions.add_parser("logs", help="print a worker's log")
    logs.add_argument("name")
    logs.add_argument("-n", "--lines", type=int, default=40)
    logs.add_argument("-f", "--follow", action="store_true")
    logs.set_defaults(run=_guarded(_workers_logs))
    down = actions.add_parser("down", help="drain and stop the workers of `kvgate workers up`")
    down.add_argument("--timeout", type=float, default=120.0)
    down.set_defaults(run=_guarded(_workers_down))
