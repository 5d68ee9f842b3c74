"""Pure placement: which GPUs (or CPU cores) and which port each worker gets.

Inputs are an inventory (``backends.gpus``), a CPU count and the number of workers; the output
is one :class:`Placement` per worker, then :func:`worker_specs` merges placements into
:class:`~backends.workers.spec.WorkerSpec` values.

GPU hosts: each worker takes ``tensor_parallel_size`` GPUs, in index order, as a contiguous group
(``CUDA_VISIBLE_DEVICES=0,1`` then ``2,3``): vLLM's tensor-parallel group then spans neighbours,
which on NVLink/PCIe-switch machines share the fastest links. ``count=None`` places as many
workers as the GPUs hold. Asking for more GPUs than exist is a :class:`PlacementError`.

CPU hosts (no GPU): each worker gets an equal, disjoint range of cores for its OpenMP threads
(``VLLM_CPU_OMP_THREADS_BIND``: ``0-7`` and ``8-15`` on 16 cores; ``0`` and ``1`` on 2); without
distinct binds two vLLM-CPU workers both bind core 0. More workers than cores share cores
(``i mod cores``). The KV cache size is ``VLLM_CPU_KVCACHE_SPACE`` (GiB), required by vllm-cpu.

Ports: ``first_port + i``, or the explicit ``ports`` list.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from backends.errors import BackendError
from backends.gpus import Gpu
from backends.workers.spec import WorkerSpec

CPU_ONLY_FIELDS = frozenset({"cpu_kvcache_space_gib", "cpu_omp_threads_bind"})
GPU_ONLY_FIELDS = frozenset({"gpu_memory_utilization", "cuda_visible_devices", "tensor_parallel_size"})


class PlacementError(BackendError):
    """The workers asked for do not fit the host (e.g. more GPUs than it has)."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one worker runs."""

    name: str
    port: int
    device: str
    """``gpu`` or ``cpu``."""
    cuda_visible_devices: str | None = None
    cpu_omp_threads_bind: str | None = None

    def spec_fields(self) -> dict[str, Any]:
        """The :class:`WorkerSpec` fields this placement decides."""
        fields: dict[str, Any] = {"port": self.port, "device": self.device}
        if self.device == "gpu":
            fields["cuda_visible_devices"] = self.cuda_visible_devices
            fields["tensor_parallel_size"] = len((self.cuda_visible_devices or "").split(","))
        else:
            fields["cpu_omp_threads_bind"] = self.cpu_omp_threads_bind
        return fields


def gpu_groups(gpus: Sequence[Gpu], tensor_parallel_size: int, count: int | None = None) -> list[tuple[int, ...]]:
    """Contiguous groups of ``tensor_parallel_size`` GPU indices, one per worker."""
    if tensor_parallel_size < 1:
        raise PlacementError(f"tensor_parallel_size: must be >= 1, got {tensor_parallel_size}")
    indices = sorted(gpu.index for gpu in gpus)
    fits = len(indices) // tensor_parallel_size
    count = fits if count is None else count
    if count < 1 or count > fits:
        raise PlacementError(f"{count} worker(s) x {tensor_parallel_size} GPU(s) do not fit the "
                             f"{len(indices)} GPU(s) of this host (at most {fits})")
    return [tuple(indices[i * tensor_parallel_size:(i + 1) * tensor_parallel_size]) for i in range(count)]


def cpu_binds(count: int, cpu_count: int) -> list[str]:
    """One disjoint core range per worker (``"0-3"``, ``"4-7"``; ``"0"`` for a single core)."""
    if count < 1:
        raise PlacementError(f"count: must be >= 1, got {count}")
    cpu_count = max(cpu_count, 1)
    if count > cpu_count:
        return [str(i % cpu_count) for i in range(count)]
    per = cpu_count // count
    return [str(i * per) if per == 1 else f"{i * per}-{(i + 1) * per - 1}" for i in range(count)]


def place(count: int | None, *, gpus: Sequence[Gpu], cpu_count: int, tensor_parallel_size: int = 1,
          first_port: int = 8001, ports: Sequence[int] | None = None,
          name_prefix: str = "worker") -> list[Placement]:
    """Placements for ``count`` workers (``None``: as many as the GPUs hold, or one on CPU)."""
    if gpus:
        groups = gpu_groups(gpus, tensor_parallel_size, count)
        slots: list[tuple[str, str | None, str | None]] = [
            ("gpu", ",".join(map(str, group)), None) for group in groups]
    else:
        slots = [("cpu", None, bind) for bind in cpu_binds(1 if count is None else count, cpu_count)]
    ports = list(ports) if ports is not None else [first_port + i for i in range(len(slots))]
    if len(ports) != len(slots):
        raise PlacementError(f"ports: {len(ports)} given for {len(slots)} worker(s)")
    return [Placement(f"{name_prefix}-{i}", port, device, cuda, bind)
            for i, ((device, cuda, bind), port) in enumerate(zip(slots, ports, strict=True))]


def worker_specs(placements: Sequence[Placement], fields: Mapping[str, Any], *,
                 cpu_kvcache_space_gib: int = 1) -> list[tuple[str, WorkerSpec]]:
    """``(name, spec)`` per placement: ``fields`` (any WorkerSpec fields) plus the placement's.

    Fields that do not apply to the placement's device are dropped, so one worker description
    runs on GPU and CPU hosts alike; on CPU ``cpu_kvcache_space_gib`` defaults to the argument.
    Raises ``ValueError`` (field named) for an invalid or unknown field.
    """
    known = {f.name for f in dataclasses.fields(WorkerSpec)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"{unknown[0]}: not a WorkerSpec field")
    out = []
    for placement in placements:
        drop = GPU_ONLY_FIELDS if placement.device == "cpu" else CPU_ONLY_FIELDS
        merged = {k: v for k, v in fields.items() if k not in drop}
        if placement.device == "cpu":
            merged.setdefault("cpu_kvcache_space_gib", cpu_kvcache_space_gib)
        merged.update(placement.spec_fields())
        out.append((placement.name, WorkerSpec(**merged)))
    return out
