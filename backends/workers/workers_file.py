"""The workers ``kvgate workers up`` runs: command-line options plus an optional TOML file.

A file describes defaults for every worker and, optionally, each worker::

    [defaults]                 # any WorkerSpec field (see backends/workers/spec.py)
    kv_cache_dtype = "fp8"
    max_model_len = 2048
    enforce_eager = true

    [[workers]]                # one table per worker; count = number of tables
    name = "fp16-ref"
    kv_cache_dtype = "auto"

    [[workers]]
    port = 8105

:func:`plan_workers` (pure) places the workers (``backends.placement``: GPU groups or CPU cores,
ports from ``first_port``), applies ``base`` fields (model, served name and the CLI options),
then ``[defaults]``, then each worker's own table. ``name`` renames a worker; any other key must
be a WorkerSpec field. Errors are ``ValueError`` naming the key.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from backends.gpus import Gpu
from backends.placement import place, worker_specs
from backends.workers.spec import WorkerSpec


def load_workers_file(path: str | Path) -> dict[str, Any]:
    """[io] The TOML document at ``path``; ``ValueError`` when it is not valid TOML."""
    try:
        return tomllib.loads(Path(path).read_text())
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: {exc}") from exc


def plan_workers(base: Mapping[str, Any], document: Mapping[str, Any] | None = None, *, count: int = 1,
                 gpus: Sequence[Gpu] = (), cpu_count: int = 2, first_port: int = 8001,
                 cpu_kvcache_space_gib: int = 1, name_prefix: str = "worker") -> list[tuple[str, WorkerSpec]]:
    """``(name, spec)`` for each worker; the file's ``[[workers]]`` count wins over ``count``."""
    document = document or {}
    unknown = sorted(set(document) - {"defaults", "workers"})
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown table (expected [defaults] and [[workers]])")
    per_worker: list[dict[str, Any]] = [dict(w) for w in document.get("workers", [])] or [{} for _ in range(count)]
    defaults = dict(document.get("defaults", {}))
    tp = int(defaults.get("tensor_parallel_size", base.get("tensor_parallel_size", 1)))
    placements = place(len(per_worker), gpus=gpus, cpu_count=cpu_count, tensor_parallel_size=tp,
                       first_port=first_port, name_prefix=name_prefix)
    named = worker_specs(placements, {**base, **defaults}, cpu_kvcache_space_gib=cpu_kvcache_space_gib)
    out = []
    for (name, spec), own in zip(named, per_worker, strict=True):
        name = str(own.pop("name", name))
        fields = {f.name for f in dataclasses.fields(WorkerSpec)}
        bad = sorted(set(own) - fields)
        if bad:
            raise ValueError(f"workers.{name}.{bad[0]}: not a WorkerSpec field")
        out.append((name, dataclasses.replace(spec, **own)))
    names = [name for name, _ in out]
    if len(set(names)) != len(names):
        raise ValueError(f"workers: duplicate names {names}")
    return out
