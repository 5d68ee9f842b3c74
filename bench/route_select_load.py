"""Route selection under rising load: a reasoning and a fast cluster of simulated workers.

    .venv/bin/python -m bench.route_select_load [--rates 0.5,1,2,3,4] [--stage-s 30]
        [--ttft-limit-ms 1500] [--modes limit,baseline]

Testbed: two ``backends.sim`` processes on loopback, one per cluster, behind one ``kvgate serve``:

* ``reasoning`` (tier reasoning): 2 workers of 4 slots each (``--max-num-seqs 4``), slow steps
  (20 ms + 2 ms per sequence), 150-300 output tokens of which 80% stream as reasoning: about 6 s
  per request, so the cluster serves about 1.3 requests/s;
* ``fast`` (tier fast, Qwen3-style thinking switch): 2 workers of 32 slots, 5 ms + 0.3 ms per
  sequence, 40-120 output tokens: more room than any stage below needs.

Traffic: open loop, Poisson arrivals, the rate rising stage by stage (``--rates`` requests/s for
``--stage-s`` seconds each, no pause between stages). Each request is a prompt of the labeled set
(``data/routing``): a needs-reasoning one with probability ``--reasoning-share`` (0.6), else a
light one, sent as ``model: auto``, streamed. Modes, each from a fresh gateway:

* ``limit``: every request carries ``X-Max-TTFT-Ms: --ttft-limit-ms``;
* ``baseline``: no limit (what ``auto`` does without one: reasoning prompts queue on reasoning).

TTFT is measured by the client: from sending to the first event with content or reasoning
text. Per stage the table gives: requests, the share the policy wanted on reasoning
(``x-kvgate-route`` reason ``needs_reasoning`` or a ``downgrade_*``), the share of those
downgraded, TTFT p50 and p99 over all requests, p99 of those served by each cluster, the share
over the limit, and errors. JSON lines go to ``OUT/route_select_load.jsonl``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench import procs

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "data/routing/prompts.jsonl"
WANTED = ("needs_reasoning", "downgrade_ttft", "downgrade_cost", "downgrade_budget")
SIMS = {
    "reasoning": ("reasoning-sim", ["--max-num-seqs", "4", "--latency", "0.02,0.0002,0.002,0.05",
                                    "--output-len", "uniform:150:300", "--reasoning-fraction", "0.8"]),
    "fast": ("fast-sim", ["--max-num-seqs", "32", "--latency", "0.005,0.00002,0.0003,0.005",
                          "--output-len", "uniform:40:120"]),
}
WORKERS = 2


@dataclass(frozen=True)
class Result:
    stage: int
    rate: float
    reason: str
    cluster: str
    ttft_s: float | None
    ok: bool


def kvgate_config(port: int, origins: dict[str, list[str]]) -> str:
    """Two tiered clusters of simulated workers; least-in-flight inside each."""
    lines = ["[server]", 'host = "127.0.0.1"', f"port = {port}", 'log_level = "warning"', "",
             "[health]", "interval_s = 1.0", "", "[routing]", 'policy = "least-in-flight"', ""]
    shape = {
        "reasoning": ('tier = "reasoning"', 'thinking_switch = "none"', 4, 200, 6.0, 225,
                      (0.55, 0.14, 2.19)),
        "fast": ('tier = "fast"', 'thinking_switch = "enable-thinking"', 32, 50, 1.0, 80,
                 (0.10, 0.025, 0.30)),
    }
    for name, (tier, switch, slots, ttft, service, out, price) in shape.items():
        lines += [f"[clusters.{name}]", tier, switch, "max_context_tokens = 32768", "",
                  f"[clusters.{name}.selection]", f"slots_per_endpoint = {slots}", f"ttft_prior_ms = {ttft}",
                  f"service_prior_s = {service}", f"expected_output_tokens = {out}", "",
                  f"[clusters.{name}.price]", f"input_per_mtok = {price[0]}",
                  f"cached_input_per_mtok = {price[1]}", f"output_per_mtok = {price[2]}", ""]
        for index, origin in enumerate(origins[name]):
            lines += [f"[[clusters.{name}.endpoints]]", f'name = "{name}-{index}"', f'url = "{origin}/v1"',
                      f'model = "{SIMS[name][0]}"', ""]
    return "\n".join(lines)


def prompts() -> dict[bool, list[str]]:
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {label: [r["prompt"] for r in rows if r["needs_reasoning"] is label] for label in (True, False)}


def _has_text(event: dict[str, Any]) -> bool:
    return any((c.get("delta") or {}).get("content") or (c.get("delta") or {}).get("reasoning")
               for c in event.get("choices") or ())


async def one(session: aiohttp.ClientSession, url: str, body: dict[str, Any], headers: dict[str, str],
              at: float, stage: int, rate: float) -> Result:
    await asyncio.sleep(max(0.0, at - time.monotonic()))
    sent = time.monotonic()
    try:
        async with session.post(url, json=body, headers=headers) as reply:
            reason = reply.headers.get("x-kvgate-route", "").partition("reason=")[2]
            cluster = reply.headers.get("x-kvgate-cluster", "")
            if reply.status != 200:
                await reply.read()
                return Result(stage, rate, reason, cluster, None, False)
            ttft = None
            async for raw in reply.content:
                line = raw.strip()
                if ttft is None and line.startswith(b"data: {") and _has_text(json.loads(line[6:])):
                    ttft = time.monotonic() - sent
            return Result(stage, rate, reason, cluster, ttft, ttft is not None)
    except (aiohttp.ClientError, OSError, TimeoutError):
        return Result(stage, rate, "", "", None, False)


async def drive(base: str, rates: list[float], stage_s: float, limit_ms: float | None, share: float,
                seed: int) -> list[Result]:
    """Open-loop Poisson arrivals, stage after stage; wait for every request."""
    rng = random.Random(seed)
    pool = prompts()
    headers = {"X-Max-TTFT-Ms": f"{limit_ms:g}"} if limit_ms is not None else {}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
        start = time.monotonic()
        tasks = []
        offset = 0.0
        for stage, rate in enumerate(rates):
            t = offset + rng.expovariate(rate)
            while t < offset + stage_s:
                text = rng.choice(pool[rng.random() < share])
                body = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": text}]}
                tasks.append(asyncio.ensure_future(
                    one(session, f"{base}/v1/chat/completions", body, headers, start + t, stage, rate)))
                t += rng.expovariate(rate)
            offset += stage_s
        return list(await asyncio.gather(*tasks))


def p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def stage_row(mode: str, stage: list[Result], limit_ms: float | None) -> dict[str, Any]:
    ttfts = [r.ttft_s for r in stage if r.ttft_s is not None]
    wanted = [r for r in stage if r.reason in WANTED]
    down = [r for r in wanted if r.reason.startswith("downgrade")]
    ms = lambda v: None if v is None else round(v * 1000)  # noqa: E731
    by = {c: [r.ttft_s for r in stage if r.cluster == c and r.ttft_s is not None] for c in ("reasoning", "fast")}
    over = sum(1 for v in ttfts if limit_ms is not None and v * 1000 > limit_ms)
    return {
        "mode": mode, "rate": stage[0].rate if stage else None, "requests": len(stage),
        "wanted_reasoning": len(wanted), "downgraded": round(len(down) / len(wanted), 3) if wanted else 0.0,
        "upgraded": sum(1 for r in stage if r.reason.startswith("upgrade")),
        "ttft_p50_ms": ms(p(ttfts, 0.5)), "ttft_p99_ms": ms(p(ttfts, 0.99)),
        "reasoning_p99_ms": ms(p(by["reasoning"], 0.99)), "fast_p99_ms": ms(p(by["fast"], 0.99)),
        "over_limit": round(over / len(ttfts), 3) if ttfts and limit_ms is not None else None,
        "errors": sum(1 for r in stage if not r.ok),
    }


def table(rows: list[dict[str, Any]], limit_ms: float) -> str:
    head = ("| mode | offered req/s | requests | wanted reasoning | downgraded | TTFT p50 ms | TTFT p99 ms "
            f"| p99 on reasoning | p99 on fast | over {limit_ms:g} ms | errors |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        over = "-" if r["over_limit"] is None else f"{r['over_limit']:.1%}"
        lines.append(f"| {r['mode']} | {r['rate']:g} | {r['requests']} | {r['wanted_reasoning']} | "
                     f"{r['downgraded']:.1%} | {r['ttft_p50_ms']} | {r['ttft_p99_ms']} | {r['reasoning_p99_ms']} | "
                     f"{r['fast_p99_ms']} | {over} | {r['errors']} |")
    return "\n".join(lines)


async def run_mode(mode: str, args: argparse.Namespace, origins: dict[str, list[str]], port: int) -> list[dict[str, Any]]:
    config = args.out / f"kvgate-route-select-{mode}.toml"
    config.write_text(kvgate_config(port, origins))
    gateway = procs.start(f"kvgate-route-select-{mode}", procs.kvgate_command(config), args.out / "logs")
    try:
        await procs.wait_gateway_endpoints(f"http://127.0.0.1:{port}", gateway, 2 * WORKERS)
        limit = args.ttft_limit_ms if mode == "limit" else None
        results = await drive(f"http://127.0.0.1:{port}", args.rates, args.stage_s, limit, args.reasoning_share, args.seed)
    finally:
        gateway.stop()
    stages = [[r for r in results if r.stage == i] for i in range(len(args.rates))]
    rows = [stage_row(mode, stage, args.ttft_limit_ms if mode == "limit" else None) for stage in stages]
    over_all = [r for r in results if r.ttft_s is not None]
    rows.append({**stage_row(mode, results, args.ttft_limit_ms if mode == "limit" else None), "rate": 0.0,
                 "ttft_p99_ms": round((p([r.ttft_s for r in over_all], 0.99) or 0) * 1000)})
    return rows


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    base = procs.free_port_block(2 * WORKERS + 1)
    origins = {name: [f"http://127.0.0.1:{base + i + k * WORKERS}" for i in range(WORKERS)] for k, name in enumerate(SIMS)}
    sims = []
    try:
        for k, (name, (model, extra)) in enumerate(SIMS.items()):
            command = procs.sim_command(base + k * WORKERS, WORKERS, "gpu-8b", model, args.seed, extra)
            sims.append(procs.start(f"sim-{name}", command, args.out / "logs"))
        for child, name in zip(sims, SIMS):
            for origin in origins[name]:
                await procs.wait_ready(f"{origin}/health", child)
        rows: list[dict[str, Any]] = []
        for mode in args.modes:
            rows += await run_mode(mode, args, origins, base + 2 * WORKERS)
        return rows
    finally:
        for child in sims:
            child.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.route_select_load", description=__doc__.split("\n")[0])
    parser.add_argument("--rates", type=lambda s: [float(x) for x in s.split(",")], default=[0.5, 1, 2, 3, 4])
    parser.add_argument("--stage-s", type=float, default=30.0)
    parser.add_argument("--ttft-limit-ms", type=float, default=1500.0)
    parser.add_argument("--reasoning-share", type=float, default=0.6)
    parser.add_argument("--modes", type=lambda s: s.split(","), default=["limit", "baseline"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = asyncio.run(main_async(args))
    with (args.out / "route_select_load.jsonl").open("w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    for row in rows:
        if row["rate"] == 0.0:
            row["rate"] = float("nan")
    print(table(rows, args.ttft_limit_ms).replace("| nan |", "| all |"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
