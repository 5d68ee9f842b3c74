"""Many concurrent streams on one worker and one event loop: all complete, metrics add up.

A correctness check at scale, not a timing one (``bench/sim_capacity.py`` measures speed).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import aiohttp
from sim_support import MODEL, RunningSim, instant_config

from backends.sim.presets import get_preset

STREAMS = 1000
TOKENS = 8


async def _stream(session: aiohttp.ClientSession, url: str, index: int) -> int:
    body = {"model": MODEL, "max_tokens": TOKENS, "stream": True,
            "messages": [{"role": "user", "content": f"stream number {index}"}]}
    events = 0
    async with session.post(url, json=body) as reply:
        async for line in reply.content:
            events += line.startswith(b"data: {")
    return events


async def test_a_thousand_concurrent_streams(sim_factory) -> None:  # type: ignore[no-untyped-def]
    preset = replace(get_preset("instant"), max_num_seqs=STREAMS)
    sim: RunningSim = await sim_factory(instant_config(preset=preset))
    url = f"{sim.origin}/v1/chat/completions"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        counts = await asyncio.gather(*(_stream(session, url, i) for i in range(STREAMS)))
    assert counts == [1 + TOKENS] * STREAMS
    assert sim.worker.metrics.success == {"length": STREAMS}
    assert sim.worker.metrics.generation_tokens == STREAMS * TOKENS
    assert sim.worker.engine.cache.used_blocks == 0 and sim.worker.in_flight == 0
