"""Helpers and fixtures of the simulator's integration tests: a real aiohttp server on loopback.

Each test gets a fresh worker on a free port, with the ``instant`` preset (no step latency) and a
:class:`ManualClock`, so faults with a duration (``slow-first-token``, ``hang-*:seconds=``) only
end when the test advances the clock: nothing waits on the wall clock for its logic.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import httpx
import openai
import pytest_asyncio

from backends.sim.clock import ManualClock
from backends.sim.presets import get_preset
from backends.sim.server import serve
from backends.sim.worker import SimConfig, SimWorker

MODEL = "sim-model"


@dataclass
class RunningSim:
    worker: SimWorker
    clock: ManualClock
    origin: str
    http: httpx.AsyncClient
    client: openai.AsyncOpenAI


def instant_config(**changes: object) -> SimConfig:
    """The integration tests' default: zero latency, 16-token blocks."""
    return replace(SimConfig(model=MODEL, preset=get_preset("instant")), **changes)  # type: ignore[arg-type]


async def start_sim(config: SimConfig) -> tuple[SimWorker, ManualClock, list, str]:
    clock = ManualClock()
    worker = SimWorker(config, clock)
    runners = await serve([worker], "127.0.0.1", 0)
    port = runners[0].addresses[0][1]
    return worker, clock, runners, f"http://127.0.0.1:{port}"


@pytest_asyncio.fixture
async def sim_factory() -> AsyncIterator:
    started: list = []

    async def make(config: SimConfig | None = None) -> RunningSim:
        worker, clock, runners, origin = await start_sim(config or instant_config())
        http = httpx.AsyncClient(base_url=origin, timeout=30)
        client = openai.AsyncOpenAI(base_url=origin + "/v1", api_key="unused", max_retries=0,
                                    timeout=30)
        running = RunningSim(worker, clock, origin, http, client)
        started.append((running, runners))
        return running

    yield make
    for running, runners in started:
        await running.client.close()
        await running.http.aclose()
        for runner in runners:
            await runner.cleanup()


@pytest_asyncio.fixture
async def sim(sim_factory) -> RunningSim:  # type: ignore[no-untyped-def]
    return await sim_factory()
