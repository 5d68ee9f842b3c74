"""[io] One worker's KV capacity: planned from its spec, and reported by the running vLLM.

:func:`plan_for_spec` reads the model's ``config.json`` (when ``spec.model`` is a local
directory) and plans with ``backends.kv.planner`` (``auto`` KV sized in the spec's ``--dtype``): on CPU the budget is exactly
``VLLM_CPU_KVCACHE_SPACE``; on GPU it needs the GPU's memory (``gpu_memory_bytes``), else only
the per-token figures are planned. Block size: the spec's, else vLLM's default for the device.
It returns None (never raises) when the model cannot be planned: a hub id, a refused attention
type. :func:`fetch_reported` reads ``vllm:cache_config_info`` from the worker's ``/metrics`` and
falls back to the "KV cache size" line of its log; None when neither says.
"""

from __future__ import annotations

import logging
from pathlib import Path

import aiohttp

from backends.errors import BackendError
from backends.kv.geometry import load_geometry, weights_bytes_on_disk
from backends.kv.planner import DEFAULT_BLOCK_SIZE, KvPlan, cpu_budget, gpu_budget, kv_storage_dtype, plan
from backends.kv.report import ReportedCapacity, from_log, from_metrics
from backends.workers.process import tail_lines
from backends.workers.spec import WorkerSpec

log = logging.getLogger("kvgate.workers")

_LOG_TAIL_FOR_CAPACITY = 400


def plan_for_spec(spec: WorkerSpec, gpu_memory_bytes: int | None = None) -> KvPlan | None:
    """The planned KV capacity of ``spec``'s worker, or None if its model cannot be planned."""
    if not (Path(spec.model).expanduser() / "config.json").is_file():
        return None
    try:
        geometry = load_geometry(spec.model)
        block_size = spec.block_size or DEFAULT_BLOCK_SIZE[spec.device]
        budget = None
        if spec.device == "cpu" and spec.cpu_kvcache_space_gib:
            budget = cpu_budget(spec.cpu_kvcache_space_gib)
        elif spec.device == "gpu" and gpu_memory_bytes:
            weights = weights_bytes_on_disk(spec.model) or (geometry.params or 0) * 2
            budget = gpu_budget(gpu_memory_bytes, spec.gpu_memory_utilization or 0.9, weights,
                                tensor_parallel_size=spec.tensor_parallel_size)
        return plan(geometry, kv_cache_dtype=kv_storage_dtype(spec.kv_cache_dtype, spec.dtype),
                    max_model_len=spec.max_model_len, budget=budget, block_size=block_size,
                    tensor_parallel_size=spec.tensor_parallel_size)
    except BackendError as exc:
        log.info("no KV plan for %s: %s", spec.model, exc)
        return None


async def fetch_reported(origin: str, log_path: Path | None = None, *,
                         timeout_s: float = 5.0) -> ReportedCapacity | None:
    """What the worker at ``origin`` (``http://host:port``) reports: ``/metrics``, else its log."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
            async with session.get(f"{origin}/metrics") as response:
                if response.status == 200:
                    reported = from_metrics(await response.text())
                    if reported is not None and reported.kv_cache_tokens is not None:
                        return reported
    except (aiohttp.ClientError, TimeoutError) as exc:
        log.info("no /metrics from %s: %s", origin, exc)
    return from_log(tail_lines(log_path, _LOG_TAIL_FOR_CAPACITY)) if log_path is not None else None


async def probe_worker(spec: WorkerSpec, log_path: Path | None) -> ReportedCapacity | None:
    """:func:`fetch_reported` for ``spec``'s worker (the supervisor's default capacity probe)."""
    return await fetch_reported(spec.origin, log_path)
