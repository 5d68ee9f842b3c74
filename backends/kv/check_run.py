"""[io] Running ``kvgate kv-check``: ask two workers the eval set, greedy, and compare them.

:func:`ask` sends one question as a streamed chat completion (``temperature`` 0, ``max_tokens``,
``stream_options.include_usage``) and times it: TTFT at the first content delta, decode rate
from the first to the last. An in-band ``{"error": ...}`` event (vLLM keeps HTTP 200 when its
engine dies mid-stream) is an error, as is a non-200 status: :class:`BackendError`.
:func:`run_worker` asks every question, one at a time; :func:`run_pair` alternates the two
workers question by question, so that neither benefits from a quieter machine, and reads
each worker's KV capacity from its ``/metrics``. :func:`start_pair` runs two supervised workers
of the prepared model (``auto`` on core 0, ``fp8`` on core 1) for the duration of a check.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from backends.errors import BackendError
from backends.evalset import EvalItem, is_correct
from backends.kv.check import Sample, WorkerRun
from backends.workers.lifecycle import RestartPolicy
from backends.workers.local import free_ports
from backends.placement import cpu_binds
from backends.workers.prepared import Runtime
from backends.workers.spec import WorkerSpec
from backends.workers.supervisor import VllmRunner, WorkerSupervisor
from backends.workers.capacity import fetch_reported

SYSTEM_PROMPT = "Answer the question in one short sentence."


@dataclass(frozen=True, slots=True)
class Target:
    """A worker to check: a label for the table, its origin (``http://host:port``), model and dtype."""

    label: str
    origin: str
    model: str
    kv_cache_dtype: str


async def ask(session: aiohttp.ClientSession, target: Target, item: EvalItem, *, max_tokens: int = 24,
              clock: Callable[[], float] = time.perf_counter) -> Sample:
    """One greedy, streamed answer to ``item`` with its timings."""
    body = {"model": target.model, "temperature": 0, "max_tokens": max_tokens, "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": item.question}]}
    text: list[str] = []
    first = last = None
    tokens = 0
    sent = clock()
    async with session.post(f"{target.origin}/v1/chat/completions", json=body) as response:
        if response.status != 200:
            raise BackendError(f"{target.label}: HTTP {response.status}: {(await response.text())[:300]}")
        async for raw in response.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            if "error" in event:
                raise BackendError(f"{target.label}: error in stream: {event['error']}")
            for choice in event.get("choices") or ():
                piece = (choice.get("delta") or {}).get("content") or ""
                if piece:
                    first = clock() if first is None else first
                    last = clock()
                    text.append(piece)
            tokens = (event.get("usage") or {}).get("completion_tokens", tokens)
    answer = "".join(text)
    decode = last - first if first is not None and last is not None and tokens > 1 else None
    return Sample(item.id, answer, is_correct(answer, item.answers), None if first is None else first - sent,
                  tokens, decode)


async def run_pair(baseline: Target, candidate: Target, items: Sequence[EvalItem], *, max_tokens: int = 24,
                   timeout_s: float = 120.0) -> tuple[WorkerRun, WorkerRun]:
    """Both workers' answers to every item (alternating), with their reported KV capacity."""
    samples: dict[str, list[Sample]] = {baseline.label: [], candidate.label: []}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        for item in items:
            for target in (baseline, candidate):
                samples[target.label].append(await ask(session, target, item, max_tokens=max_tokens))
    runs = []
    for target in (baseline, candidate):
        reported = await fetch_reported(target.origin)
        dtype = (reported.cache_dtype if reported is not None else None) or target.kv_cache_dtype
        runs.append(WorkerRun(target.label, dtype, tuple(samples[target.label]),
                              reported.kv_cache_tokens if reported is not None else None))
    return runs[0], runs[1]


def pair_specs(runtime: Runtime, dtypes: tuple[str, str], *, ports: Sequence[int] | None = None,
               cpu_count: int = 2, cpu_kvcache_space_gib: int = 1, max_model_len: int = 2048,
               names: Sequence[str] | None = None, dtype: str | None = None,
               dtype_reason: str | None = None) -> list[tuple[str, WorkerSpec]]:
    """Two eager CPU workers of the prepared model, one per KV dtype, on disjoint cores.

    Named ``kv-DTYPE`` unless ``names`` are given; ``dtype`` is the model's ``--dtype`` for both.
    """
    ports = list(ports) if ports is not None else free_ports(2)
    binds = cpu_binds(2, cpu_count)
    names = list(names) if names is not None else [f"kv-{kv}" for kv in dtypes]
    return [(name, WorkerSpec(model=str(runtime.model_dir), served_model_name=runtime.served_model_name,
                              port=port, kv_cache_dtype=kv, dtype=dtype, dtype_reason=dtype_reason,
                              max_model_len=max_model_len, enforce_eager=True,
                              cpu_kvcache_space_gib=cpu_kvcache_space_gib, cpu_omp_threads_bind=bind))
            for name, kv, port, bind in zip(names, dtypes, ports, binds, strict=True)]


@contextlib.asynccontextmanager
async def start_pair(runtime: Runtime, dtypes: tuple[str, str] = ("auto", "fp8"), *, cpu_count: int = 2,
                     log_dir: Path | None = None, dtype: str | None = None) -> AsyncIterator[tuple[Target, Target]]:
    """Two supervised workers (model ``--dtype`` ``dtype``), ready, stopped (process groups included) on exit."""
    specs = pair_specs(runtime, dtypes, cpu_count=cpu_count, dtype=dtype)
    supervisor = WorkerSupervisor(specs, VllmRunner(runtime.worker_python, log_dir),
                                  policy=RestartPolicy(crash_loop_limit=0))
    async with supervisor:
        yield tuple(Target(dtype, spec.origin, spec.served_model_name, dtype)  # type: ignore[misc]
                    for dtype, (_, spec) in zip(dtypes, specs, strict=True))
