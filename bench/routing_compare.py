"""Testbed comparison for prefix-aware routing: kvgate's policies, the oracle and the peer routers.

Runs the testbed of :mod:`bench.run` (N simulated workers, one trace replayed open-loop, every
policy from a cold start) for: ``round-robin``, ``least-in-flight``, kvgate's ``prefix-aware``
profile, SGLang's router (``sglang-router``, ``--policy cache_aware``) and ``vllm-router``
(``--policy cache_aware``), plus the offline oracle row. Peer routers run from their own virtual
environment (``--peers-venv``, default ``~/.cache/kvgate/peers-venv``, made with
``pip install sglang-router==0.3.2 vllm-router==0.1.17``); a peer that is not installed is
skipped with a note. Prints the table (and the targets of issue 10 checked against it).

    .venv/bin/python -m bench.routing_compare --workers 4 --profile shared-prefix

Note on ``vllm-router``: its ``cache_aware`` policy asks each worker to render (tokenize) the
prompt first; real vLLM workers answer that only with ``--enable-scale-out``, and the simulated
ones not at all, so here it degrades to its load-based fallback. It is listed for completeness.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from pathlib import Path

from bench import run as testbed
from bench.report import PolicyRow, format_table

PEERS_VENV = Path.home() / ".cache" / "kvgate" / "peers-venv"
KVGATE = ("round-robin", "least-in-flight", "prefix-aware")


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


def targets(rows: list[PolicyRow]) -> list[str]:
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
                     f"{mine.ttft_p50_ms} vs {sglang.ttft_p50_ms} ms, imbalance {mine.imbalance} vs {sglang.imbalance}")
    return lines


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
    parser.add_argument("--peers-venv", type=Path, default=PEERS_VENV)
    parser.add_argument("--only", help="comma-separated subset of policies to run")
    own, rest = parser.parse_known_args(argv)
    args = testbed._parse_args(rest)
    args.out.mkdir(parents=True, exist_ok=True)
    peers = peer_commands(own.peers_venv)
    prom = testbed.procs.free_port_block(1, start=31000)
    routers = {name: command.replace("{prom}", str(prom)) for name, command in peers.items()}
    policies = [*KVGATE, *routers]
    if own.only:
        policies = [p for p in policies if p in own.only.split(",")]
    if not peers:
        print(f"note: no peer routers in {own.peers_venv}; skipped", file=sys.stderr)
    rows = asyncio.run(_main(args, policies, routers))
    print(format_table(rows))
    for line in targets(rows):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
