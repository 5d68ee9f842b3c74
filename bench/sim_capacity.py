"""How many concurrent streams one simulated worker process carries on one core.

Starts ``python -m backends.sim`` (pinned to one CPU with ``taskset`` when ``--cpu`` is given)
with a batch limit above the stream count, opens ``--streams`` concurrent streaming chat requests
of ``--tokens`` tokens each from this process, and reports: completed streams, wall time,
generated tokens per second, the client-side inter-chunk gap p50/p99 over the second half of the streams
(steady state: all admitted, decode only), the simulator's own mean
ITL (from its metrics) against the latency model's step time, and the simulator's CPU use
(``/proc/PID/stat`` user+system time over the wall time, and per generated token). A simulator
that keeps up shows its ITL near the model's step time and CPU below 100%; on a shared machine
the CPU time per token is the figure that survives the neighbours.

    python -m bench.sim_capacity --streams 2000 --tokens 64 --cpu 1
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import time
from pathlib import Path

import aiohttp

from backends.sim.presets import get_preset
from bench import procs
from bench.trace import percentile


def _server_itl(metrics: str) -> float:
    """Mean inter-token latency the simulator itself recorded (seconds)."""
    values = {line.split("{")[0]: float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
              if line.startswith("vllm:inter_token_latency_seconds_")}
    count = values.get("vllm:inter_token_latency_seconds_count", 0.0)
    return values.get("vllm:inter_token_latency_seconds_sum", 0.0) / count if count else 0.0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _stream(session: aiohttp.ClientSession, url: str, index: int, tokens: int) -> list[float]:
    body = {"model": "sim-model", "max_tokens": tokens, "stream": True,
            "messages": [{"role": "user", "content": f"stream {index} says hello"}]}
    arrivals = []
    async with session.post(url, json=body) as reply:
        async for line in reply.content:
            if line.startswith(b"data: {"):
                arrivals.append(time.monotonic())
    return arrivals


async def run(args: argparse.Namespace) -> dict[str, object]:
    port = procs.free_port_block(1)
    block = get_preset(args.preset).block_size
    blocks = args.streams * -(-(args.tokens + 64) // block) + 1024  # no preemption
    extra = ["--max-num-seqs", str(args.streams), "--num-blocks", str(blocks)]
    child = procs.start("sim-capacity", procs.sim_command(port, 1, args.preset, "sim-model", 0, extra),
                        args.out / "logs", args.cpu)
    try:
        await procs.wait_ready(f"http://127.0.0.1:{port}/health", child)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        cpu_before, start = _cpu_seconds(child.process.pid), time.monotonic()
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector,
                                         timeout=aiohttp.ClientTimeout(total=600)) as session:
            streams = await asyncio.gather(*(_stream(session, url, i, args.tokens)
                                             for i in range(args.streams)))
        wall = time.monotonic() - start
        cpu = _cpu_seconds(child.process.pid) - cpu_before
        async with aiohttp.ClientSession() as session, session.get(
                f"http://127.0.0.1:{port}/metrics") as reply:
            itl = _server_itl(await reply.text())
    finally:
        child.stop()
    steady = [s[len(s) // 2:] for s in streams]  # second half: every stream admitted by then
    gaps = [b - a for s in steady for a, b in itertools.pairwise(s)]
    latency = get_preset(args.preset).latency
    return {
        "streams": args.streams, "completed": sum(1 for s in streams if len(s) >= args.tokens + 1),
        "wall_s": round(wall, 2), "tokens_per_s": round(args.streams * args.tokens / wall),
        "gap_p50_ms": round(percentile(gaps, 0.5) * 1000, 1),
        "gap_p99_ms": round(percentile(gaps, 0.99) * 1000, 1),
        "model_step_ms": round(latency.step_seconds(0, args.streams) * 1000, 1),
        "server_itl_ms": round(itl * 1000, 1),
        "sim_cpu_pct": round(100 * cpu / wall, 1),
        "sim_cpu_us_per_token": round(1e6 * cpu / (args.streams * args.tokens), 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sim_capacity", description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=2000)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--preset", default="gpu-8b")
    parser.add_argument("--cpu", help="pin the simulator to this CPU list (taskset -c)")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = asyncio.run(run(args))
    print(json.dumps(result) if args.json else
          "\n".join(f"{key:>14}  {value}" for key, value in result.items()))
    return 0 if result["completed"] == args.streams else 1


if __name__ == "__main__":
    raise SystemExit(main())
