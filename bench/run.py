"""The testbed: N simulated workers behind kvgate (or another router), one trace, every policy.

For each policy, in turn and from a cold start:

1. start N simulated workers (one ``python -m backends.sim --count N`` process) and wait for
   their ``/health``;
2. start the router: ``kvgate serve`` with a generated config (``[routing] policy = ...``, one
   endpoint per worker) and wait until its ``/ready`` counts N healthy endpoints; or an external
   router from ``--router NAME=COMMAND`` (``{port}``, ``{urls}`` and ``{urls_comma}`` are filled in,
   e.g. ``vllm-router --worker-urls {urls} --port {port}``);
3. replay the trace open-loop through the router (:mod:`bench.replay`);
4. read every worker's ``/metrics`` (prefix-cache queries/hits, finished requests), stop all.

Then the oracle row (:mod:`bench.oracle`) is computed offline on the same trace and cache sizes,
and the table (or ``--json`` lines) printed; results are also written to ``OUT/results.jsonl``.

    python -m bench.run --workers 4 --policies round-robin,least-in-flight
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
from dataclasses import replace
from pathlib import Path

import aiohttp

from backends.sim.presets import PRESETS, get_preset
from bench import procs
from bench.oracle import oracle
from bench.replay import replay
from bench.report import PolicyRow, WorkerStats, format_json, format_table, parse_worker_metrics, policy_row
from bench.trace import Trace, load_trace, save_trace
from bench.workload import PROFILES, generate

KVGATE_POLICIES = ("round-robin", "least-in-flight")
MODEL = "sim-model"


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    parser.add_argument("--trace", type=Path, help="trace file (default: generate --profile)")
    parser.add_argument("--profile", default="shared-prefix", choices=sorted(PROFILES))
    parser.add_argument("--requests", type=int, help="override the profile's request count")
    parser.add_argument("--rate", type=float, help="override the profile's arrival rate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--preset", default="gpu-small-cache", choices=sorted(PRESETS))
    parser.add_argument("--num-blocks", type=int, help="override the preset's cache capacity")
    parser.add_argument("--policies", default=",".join(KVGATE_POLICIES),
                        help="comma-separated kvgate [routing] policies and --router names")
    parser.add_argument("--router", action="append", default=[], metavar="NAME=COMMAND",
                        help="an external router to compare ({port}, {urls}, {urls_comma})")
    parser.add_argument("--oracle-load-bound", type=float, default=1.1)
    parser.add_argument("--pin", action="store_true",
                        help="taskset: workers on the last CPU, router on the first")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--json", action="store_true", help="print one JSON object per policy")
    return parser.parse_args(argv)


def _trace(args: argparse.Namespace) -> Trace:
    if args.trace is not None:
        return load_trace(args.trace)
    spec = replace(PROFILES[args.profile], seed=args.seed)
    if args.requests is not None:
        spec = replace(spec, requests=args.requests)
    if args.rate is not None:
        spec = replace(spec, rate=args.rate)
    trace = generate(spec)
    save_trace(args.out / f"trace-{args.profile}-{args.seed}.jsonl", trace)
    return trace


async def _scrape(origins: list[str]) -> list[WorkerStats]:
    async with aiohttp.ClientSession() as session:
        stats = []
        for origin in origins:
            async with session.get(f"{origin}/metrics") as reply:
                stats.append(parse_worker_metrics(await reply.text()))
        return stats


def _start_router(policy: str, args: argparse.Namespace, port: int, origins: list[str],
                  routers: dict[str, str], logs: Path) -> procs.Child:
    cpus = "0" if args.pin else None
    if policy in routers:
        command = routers[policy].format(port=port, urls=" ".join(origins),
                                         urls_comma=",".join(origins))
        return procs.start(f"router-{policy}", shlex.split(command), logs, cpus)
    config = args.out / f"kvgate-{policy}.toml"
    config.write_text(procs.kvgate_config(port, policy, MODEL, origins))
    return procs.start(f"kvgate-{policy}", procs.kvgate_command(config), logs, cpus)


async def run_policy(policy: str, trace: Trace, args: argparse.Namespace,
                     routers: dict[str, str]) -> PolicyRow:
    """One cold run of ``policy`` over ``trace`` (see module docstring)."""
    logs = args.out / "logs"
    port = procs.free_port_block(args.workers + 1)
    origins = [f"http://127.0.0.1:{port + i}" for i in range(args.workers)]
    extra = ["--num-blocks", str(args.num_blocks)] if args.num_blocks else []
    sims = procs.start(f"sims-{policy}", procs.sim_command(
        port, args.workers, args.preset, MODEL, args.seed, extra), logs,
        str(max((os.cpu_count() or 1) - 1, 0)) if args.pin else None)
    try:
        for origin in origins:
            await procs.wait_ready(f"{origin}/health", sims)
        router_port = port + args.workers
        router = _start_router(policy, args, router_port, origins, routers, logs)
        try:
            if policy in routers:
                await procs.wait_ready(f"http://127.0.0.1:{router_port}/v1/models", router)
            else:
                await procs.wait_gateway_endpoints(f"http://127.0.0.1:{router_port}", router,
                                                   args.workers)
            result = await replay(f"http://127.0.0.1:{router_port}/v1", MODEL, trace.requests)
        finally:
            router.stop()
        stats = await _scrape(origins)
    finally:
        sims.stop()
    return policy_row(policy, result, stats)


def oracle_row(trace: Trace, args: argparse.Namespace) -> PolicyRow:
    preset = get_preset(args.preset).with_overrides(num_blocks=args.num_blocks)
    result = oracle(trace.requests, args.workers, preset, args.oracle_load_bound)
    return PolicyRow(
        policy=f"oracle (load<={args.oracle_load_bound:g})", hit_rate=round(result.hit_rate, 4),
        ttft_p50_ms=None, ttft_p99_ms=None, e2e_p50_ms=None, e2e_p99_ms=None, req_per_s=None,
        tok_per_s=None, imbalance=round(result.imbalance, 3), requests=len(trace.requests),
        errors=0, per_worker=result.per_worker,
    )


async def _main(args: argparse.Namespace) -> list[PolicyRow]:
    routers = dict(spec.split("=", 1) for spec in args.router)
    trace = _trace(args)
    rows = []
    for policy in [p.strip() for p in args.policies.split(",") if p.strip()]:
        rows.append(await run_policy(policy, trace, args, routers))
    rows.append(oracle_row(trace, args))
    return rows


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows = asyncio.run(_main(args))
    (args.out / "results.jsonl").write_text(format_json(rows) + "\n")
    print(format_json(rows) if args.json else format_table(rows))
    return 1 if any(row.errors == row.requests for row in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
