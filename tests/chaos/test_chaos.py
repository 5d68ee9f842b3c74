"""Chaos run: kvgate in front of three simulated vLLM workers under streaming load, with faults.

Worker ``sim-0`` stays healthy throughout. ``sim-1`` gets worker-wide faults: 5xx bursts, 429
storms with ``Retry-After``, streams cut after N tokens, streams that hang, in-band error events.
``sim-2`` is killed (SIGKILL, whole process group) in the middle of round 1 and restarted before
round 2. While one healthy endpoint remains, the contract says:

* zero client-visible failures: every stream ends with a ``finish_reason`` and ``[DONE]``, no
  error event, HTTP 200;
* no duplicated or lost text: each answer has exactly ``max_tokens`` output chunks (the
  simulator generates exactly ``max_tokens``), one role chunk and one id;
* every in-flight counter back to zero afterwards (``kvgate_endpoint_in_flight``);
* the gateway's RSS flat between the two rounds.

Sized for CI: two rounds of 48 streams at concurrency 12, about 30 s.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from bench import procs

MAX_TOKENS = 30
STREAMS_PER_ROUND = 48
CONCURRENCY = 12
FAULTS = [
    "error:status=503,p=0.25",
    "rate-limit:retry_after=0.05,p=0.2",
    "drop-after:tokens=8,p=0.2",
    "stream-error:tokens=12,p=0.2",
    "hang-after:tokens=5,seconds=30,p=0.15",
]


def _sim(port: int, log_dir: Path, name: str) -> procs.Child:
    # ~6 ms per step: a 30-token answer streams for about 0.2 s, long enough to be cut mid-way.
    argv = procs.sim_command(port, 1, "instant", "chaos", 7, ["--latency", "0.006,0.00001,0.0005", "--output-len", "max"])
    return procs.start(name, argv, log_dir)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, object]]:
    base = procs.free_port_block(5)
    ports = [base, base + 1, base + 2]
    gateway_port = base + 4
    sims = [_sim(port, tmp_path, f"sim-{i}") for i, port in enumerate(ports)]
    endpoints = "\n".join(
        f'[[clusters.sim.endpoints]]\nname = "sim-{i}"\nurl = "http://127.0.0.1:{port}/v1"\nmodel = "chaos"\n'
        for i, port in enumerate(ports)
    )
    config = tmp_path / "kvgate.toml"
    config.write_text(
        f"""
[server]
port = {gateway_port}
log_level = "warning"
[upstream]
max_attempts = 3
max_retry_after_s = 0.1
[upstream.timeouts]
connect_s = 1.0
first_byte_s = 2.0
idle_s = 0.5
total_s = 5.0
[circuit]
consecutive_failures = 3
cooldown_s = 0.5
max_cooldown_s = 2.0
[health]
interval_s = 0.5
timeout_s = 0.5
[clusters.sim]
{endpoints}
[models.chaos]
cluster = "sim"
"""
    )
    gateway = procs.start("kvgate", procs.kvgate_command(config), tmp_path)
    state: dict[str, object] = {"sims": sims, "ports": ports, "gateway": gateway, "url": f"http://127.0.0.1:{gateway_port}", "dir": tmp_path}
    try:
        asyncio.run(_ready(state))
        yield state
    finally:
        gateway.stop()
        for sim in state["sims"]:  # type: ignore[attr-defined]
            sim.stop()


async def _ready(state: dict[str, object]) -> None:
    for sim, port in zip(state["sims"], state["ports"]):  # type: ignore[call-overload]
        await procs.wait_ready(f"http://127.0.0.1:{port}/health", sim)
    await procs.wait_ready(f"{state['url']}/ready", state["gateway"])  # type: ignore[arg-type]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


async def one_stream(client: httpx.AsyncClient, url: str, index: int) -> dict[str, object]:
    body = {"model": "chaos", "messages": [{"role": "user", "content": f"chaos request {index} " * 20}],
            "max_tokens": MAX_TOKENS, "stream": True}
    events: list[object] = []
    async with client.stream("POST", f"{url}/v1/chat/completions", json=body) as response:
        status = response.status_code
        raw = await response.aread()
    for block in raw.split(b"\n\n"):
        if block.startswith(b"data: "):
            data = block[6:]
            events.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
    return {"status": status, "events": events}


def check(result: dict[str, object]) -> str | None:
    """None if the client saw a correct, complete answer; else what was wrong."""
    if result["status"] != 200:
        return f"HTTP {result['status']}"
    events = result["events"]
    assert isinstance(events, list)
    chunks = [e for e in events if isinstance(e, dict)]
    if any("error" in e for e in chunks):
        return "error event: " + str([e["error"] for e in chunks if "error" in e])[:300]
    if not events or events[-1] != "[DONE]":
        return "no [DONE]"
    outputs = sum(1 for e in chunks for c in e.get("choices", []) if (c.get("delta") or {}).get("content"))
    roles = sum(1 for e in chunks for c in e.get("choices", []) if (c.get("delta") or {}).get("role"))
    finishes = [c["finish_reason"] for e in chunks for c in e.get("choices", []) if c.get("finish_reason")]
    if outputs != MAX_TOKENS:
        return f"{outputs} output chunks, expected {MAX_TOKENS}"
    if roles != 1 or len({e.get("id") for e in chunks}) != 1 or len(finishes) != 1:
        return f"roles={roles} ids={len({e.get('id') for e in chunks})} finishes={finishes}"
    return None


async def run_round(url: str, start: int, on_half: object = None) -> list[dict[str, object]]:
    semaphore = asyncio.Semaphore(CONCURRENCY)
    results: list[dict[str, object]] = []
    async with httpx.AsyncClient(timeout=30) as client:

        async def task(i: int) -> None:
            async with semaphore:
                results.append(await one_stream(client, url, start + i))
            if i == STREAMS_PER_ROUND // 3 and callable(on_half):
                on_half()

        await asyncio.gather(*(task(i) for i in range(STREAMS_PER_ROUND)))
    return results


def in_flight(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics").text
    return {m.group(1): float(m.group(2)) for m in re.finditer(r'^kvgate_endpoint_in_flight\{endpoint="([^"]+)"\} (\S+)$', text, re.M)}


def metric_total(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc for RSS")
def test_chaos_rounds_are_invisible_to_clients(cluster: dict[str, object]) -> None:
    url = str(cluster["url"])
    sims = cluster["sims"]
    ports = cluster["ports"]
    assert isinstance(sims, list) and isinstance(ports, list)
    for spec in FAULTS:
        httpx.post(f"http://127.0.0.1:{ports[1]}/admin/faults", json={"spec": spec}).raise_for_status()

    def kill_sim2() -> None:
        os.killpg(sims[2].process.pid, signal.SIGKILL)

    round1 = asyncio.run(run_round(url, 0, on_half=kill_sim2))
    sims[2].process.wait(5)
    rss1 = rss_kib(cluster["gateway"].process.pid)  # type: ignore[attr-defined]
    sims[2] = _sim(ports[2], Path(str(cluster["dir"])), "sim-2-restarted")
    asyncio.run(procs.wait_ready(f"http://127.0.0.1:{ports[2]}/health", sims[2]))
    round2 = asyncio.run(run_round(url, 1000, on_half=None))
    rss2 = rss_kib(cluster["gateway"].process.pid)  # type: ignore[attr-defined]

    failures = [problem for problem in map(check, round1 + round2) if problem]
    assert failures == [], f"{len(failures)} client-visible failures: {failures[:5]}"
    assert len(round1) == len(round2) == STREAMS_PER_ROUND
    counts = in_flight(url)
    assert counts and all(value == 0 for value in counts.values()), counts
    assert metric_total(url, "kvgate_upstream_failures_total") > 0  # the faults did fire
    assert rss2 - rss1 < 20 * 1024, f"gateway RSS grew {rss2 - rss1} KiB between rounds"
    print(f"\nchaos: rss round1 {rss1/1024:.1f} MiB, round2 {rss2/1024:.1f} MiB; "
          f"upstream failures {metric_total(url, 'kvgate_upstream_failures_total'):.0f}, "
          f"continuations {metric_total(url, 'kvgate_stream_continuations_total'):.0f}")
