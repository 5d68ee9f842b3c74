"""[io] The ``kvgate`` subcommands of the backends: managed workers, the KV planner, the FP8 check.

    kvgate workers up|status|logs|down                  managed vLLM workers (backends/workers/cli.py)
    kvgate plan MODEL [--kv-cache-dtype fp8] ...        KV bytes/token, tokens, blocks, concurrency
    kvgate plan --host [MODEL]                          what this host can run: KV dtypes, why, capacity
    kvgate kv-check [--urls AUTO_URL FP8_URL]           FP8 vs auto KV cache on the eval set
    kvgate kv-lab [--study fp8|pruning|all]             FP8 formats and KV pruning measured in torch

:func:`add_commands` registers them on ``kvgate``'s subparsers; each sets ``run=callable(args)->int``.
Exit codes: 0 success, 1 failure (a worker error; kv-check: a regression above the limit),
2 refused input (unknown attention type, bad option or file; a ``--kv-cache-dtype`` this host
cannot serve), 3 (kv-check only): the comparison cannot run on this host (no FP8 KV here).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from backends.errors import PlanError
from backends.console import guarded as _guarded, say as _say
from backends.workers.cli import add_workers
from backends.workers.spec import KV_CACHE_DTYPES

# -- kvgate plan ------------------------------------------------------------------------------
def _plan(args: argparse.Namespace) -> int:
    from backends.kv.geometry import load_geometry, weights_bytes_on_disk
    from backends.gpus import inventory
    from backends.kv.planner import DEFAULT_BLOCK_SIZE, GIB, cpu_budget, gpu_budget, plan

    if args.host:
        from backends.host_report import plan_host

        return plan_host(args)
    if args.model is None:
        raise PlanError("kvgate plan: give a MODEL (directory, config.json or preset), or --host")
    geometry = load_geometry(args.model)
    tp = args.tensor_parallel_size
    budget, device = None, "gpu"
    if args.cpu_kvcache_space_gib is not None:
        budget, device = cpu_budget(args.cpu_kvcache_space_gib), "cpu"
    else:
        memory = int(args.gpu_memory_gib * GIB) if args.gpu_memory_gib else None
        if memory is None:
            gpus = inventory()
            memory = min(g.memory_total_bytes for g in gpus[:tp]) if len(gpus) >= tp else None
        if memory is not None:
            weights = (int(args.weights_gib * GIB) if args.weights_gib is not None
                       else weights_bytes_on_disk(args.model) or (geometry.params or 0) * 2)
            if not weights:
                raise PlanError(f"{args.model}: weight size unknown (mixture of experts?): pass --weights-gib")
            budget = gpu_budget(memory, args.gpu_memory_utilization, weights, tensor_parallel_size=tp,
                                overhead_bytes=int(args.overhead_gib * GIB))
    result = plan(geometry, kv_cache_dtype=args.kv_cache_dtype, max_model_len=args.max_model_len, budget=budget,
                  block_size=args.block_size or DEFAULT_BLOCK_SIZE[device], tensor_parallel_size=tp,
                  kv_keep=args.kv_keep)
    print(json.dumps(result.to_dict(), indent=2) if args.json else _plan_text(geometry, result))
    return 0


def _size(n: int) -> str:
    """``13.1 GB, 12.2 GiB`` (decimal and binary units; MB below a gigabyte)."""
    if n >= 10**9:
        return f"{n / 1e9:.1f} GB, {n / 2**30:.1f} GiB"
    return f"{n / 1e6:.1f} MB, {n / 2**20:.1f} MiB"


def _plan_text(geometry: Any, p: Any) -> str:
    def num(v: int | float | None, unit: str = "") -> str:
        return "-" if v is None else f"{v:,}{unit}"
    shape = (f"{geometry.num_layers} layers, latent {geometry.head_dim}" if p.attention == "mla" else
             f"{geometry.num_layers} layers, {geometry.num_kv_heads} KV heads x {geometry.head_dim}")
    per_rank = f" ({p.bytes_per_token_per_rank:,} per GPU, TP {p.tensor_parallel_size})" if p.tensor_parallel_size > 1 else ""
    rows = [("model", f"{p.model} ({p.attention.upper()}: {shape})"), ("kv cache dtype", p.kv_cache_dtype),
            ("bytes per token", f"{p.bytes_per_token:,}{per_rank}")]
    if p.context_bytes:
        rows.append(("one sequence", f"{p.max_model_len:,} tokens = {p.context_bytes:,} bytes "
                                     f"({_size(p.context_bytes)})"))
    if p.kv_cache_tokens is None:
        rows.append(("capacity", "give --gpu-memory-gib or --cpu-kvcache-space-gib (no GPU found)"))
    else:
        rows += [("KV memory", f"{_size(p.kv_cache_bytes)} ({p.budget})"),
                 ("blocks", f"{num(p.num_blocks)} x {p.block_size} tokens"), ("KV tokens", num(p.kv_cache_tokens)),
                 ("concurrent seqs", f"{num(p.max_concurrent_sequences)} of {p.max_model_len:,} tokens "
                                     f"({p.max_concurrency}x)")]
    if p.kv_keep < 1:
        rows += _pruning_rows(p)
    return "\n".join(f"{k:<16} {v}" for k, v in rows)


def _pruning_rows(p: Any) -> list[tuple[str, str]]:
    """What a pruning budget buys (``--kv-keep``); vLLM does not prune: see ``kvgate kv-lab``."""
    rows = [("kv pruning", f"keep {p.kv_keep * 100:g}% of each sequence: {p.kept_tokens_per_sequence:,} of "
                           f"{p.max_model_len:,} tokens (not a vLLM feature; quality: `kvgate kv-lab --study pruning`)")]
    if p.pruned_concurrency is not None:
        rows += [("pruned seqs", f"{p.pruned_concurrent_sequences:,} of {p.max_model_len:,} tokens "
                                 f"({p.pruned_concurrency}x)"),
                 ("covered context", f"{p.covered_context_tokens:,} tokens")]
    return rows


# -- kvgate kv-check --------------------------------------------------------------------------
KV_CHECK_CANNOT_RUN = 3
"""``kvgate kv-check``'s exit status when this host cannot serve a dtype it would compare."""


def _kv_check(args: argparse.Namespace) -> int:
    from backends.evalset import load_eval
    from backends.host import kv_dtype_support
    from backends.kv.check import compare, format_disagreements, format_table

    if not args.urls:  # local workers: both dtypes must run here (remote ones are the remote host's business)
        from backends.host_report import host_facts

        facts, _ = host_facts("cpu")
        support = kv_dtype_support(facts)
        refused = [support[d] for d in (args.baseline_dtype, args.candidate_dtype) if not support[d].ok]
        if refused:
            message = (f"kv-check: {refused[0].kv_cache_dtype} KV cannot be compared on this host: {refused[0].reason}. "
                       "Run it on a host with AVX-512 or AMX (see `kvgate plan --host`), or pass --urls of workers "
                       "running elsewhere")
            if args.json:
                print(json.dumps({"passed": None, "cannot_run": True, "reason": message}, indent=2), flush=True)
            print(f"kvgate: {message}", file=sys.stderr)
            return KV_CHECK_CANNOT_RUN
    items = load_eval(args.eval)[: args.limit]
    baseline, candidate = asyncio.run(_kv_check_runs(args, items))
    result = compare(baseline, candidate, max_accuracy_drop=args.max_accuracy_drop, min_agreement=args.min_agreement)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2), flush=True)
    else:
        print(format_table(result) + "\n\n" + format_disagreements(result), flush=True)
    if not result.passed:
        from backends.kv.lab.launch import findings_hint

        print("\n" + findings_hint(), flush=True)
    return 0 if result.passed else 1


async def _kv_check_runs(args: argparse.Namespace, items: list[Any]) -> tuple[Any, Any]:
    from backends.kv.check_run import Target, run_pair, start_pair
    from backends.workers.prepared import prepare_runtime

    dtypes = (args.baseline_dtype, args.candidate_dtype)
    if args.urls:
        targets = [Target(dtype, url.rstrip("/").removesuffix("/v1"), args.model, dtype)
                   for dtype, url in zip(dtypes, args.urls, strict=True)]
        return await run_pair(*targets, items, max_tokens=args.max_tokens)
    runtime = await asyncio.to_thread(prepare_runtime, log=_say)
    from backends.workers.dtypes import choose_for_model

    dtype = choose_for_model(runtime.model_dir, "auto").choice.dtype  # the same weights dtype for both
    _say(f"starting two workers ({dtypes[0]} and {dtypes[1]} KV cache, --dtype {dtype or 'auto'}); about 30-60 s")
    async with start_pair(runtime, dtypes, cpu_count=os.cpu_count() or 1, dtype=dtype) as (base, cand):
        _say(f"asking {len(items)} questions, greedy, alternating between {base.origin} and {cand.origin}")
        return await run_pair(base, cand, items, max_tokens=args.max_tokens)


# -- kvgate kv-lab ----------------------------------------------------------------------------
def _kv_lab(args: argparse.Namespace) -> int:
    from backends.kv.lab.launch import run_lab

    extra = ["--study", args.study, "--long-count", str(args.long_count), "--long-words", str(args.long_words),
             "--tail", str(args.tail), "--budgets", *map(str, args.budgets)]
    for flag, value in (("--eval", args.eval), ("--eval-limit", args.eval_limit), ("--threads", args.threads),
                        ("--max-layers", args.max_layers)):
        if value is not None:
            extra += [flag, str(value)]
    if args.policies:
        extra += ["--policies", *args.policies]
    return run_lab(extra, out_dir=Path(args.out) if args.out else None, log=_say, plots=not args.no_plots)


# -- registration -----------------------------------------------------------------------------
def add_commands(subparsers: Any) -> None:
    """Add ``workers``, ``plan``, ``kv-check`` and ``kv-lab`` to ``kvgate``'s subparsers."""
    add_workers(subparsers)
    _add_plan(subparsers)
    _add_kv_check(subparsers)
    _add_kv_lab(subparsers)


def _add_plan(subparsers: Any) -> None:
    from backends.kv.planner import KV_DTYPE_BYTES
    from backends.model_presets import PRESETS

    plan = subparsers.add_parser("plan", help="KV cache capacity of a model (bytes/token, tokens, sequences)")
    plan.add_argument("model", nargs="?", help=f"model directory, config.json, or preset: {', '.join(PRESETS)}")
    plan.add_argument("--host", action="store_true",
                      help="what this host can run: KV dtypes with reasons, the local default and its capacity "
                           "(MODEL default: the prepared SmolLM2)")
    plan.add_argument("--kv-cache-dtype", default="fp8", choices=tuple(KV_DTYPE_BYTES))
    plan.add_argument("--max-model-len", type=int, help="context length (default: the model's)")
    plan.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    plan.add_argument("--gpu-memory-gib", type=float, help="memory of one GPU (default: nvidia-smi)")
    plan.add_argument("--cpu-kvcache-space-gib", type=float, help="plan for vLLM-CPU with this VLLM_CPU_KVCACHE_SPACE")
    plan.add_argument("--tensor-parallel-size", type=int, default=1)
    plan.add_argument("--block-size", type=int, help="KV block size (default 16 on GPU, 128 on CPU)")
    plan.add_argument("--weights-gib", type=float, help="weights size (default: *.safetensors, else estimated)")
    plan.add_argument("--overhead-gib", type=float, default=2.0, help="activations, CUDA graphs... per GPU (default 2)")
    plan.add_argument("--kv-keep", type=float, default=1.0,
                      help="pruning budget: fraction of each sequence's KV kept, in (0, 1] (default 1: none)")
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.set_defaults(run=_guarded(_plan))


def _add_kv_check(subparsers: Any) -> None:
    check = subparsers.add_parser("kv-check", help="FP8 KV cache regression check on two workers (auto vs fp8)",
                                  epilog="exit status: 0 passed, 1 regression, 2 bad input, "
                                         f"{KV_CHECK_CANNOT_RUN} this host cannot serve one of the dtypes (no FP8 KV)")
    check.add_argument("--urls", nargs=2, metavar=("BASELINE_URL", "CANDIDATE_URL"),
                       help="use running workers (default: start two local vLLM-CPU workers)")
    check.add_argument("--model", default="smollm2", help="served model name (with --urls)")
    check.add_argument("--baseline-dtype", default="auto", choices=KV_CACHE_DTYPES)
    check.add_argument("--candidate-dtype", default="fp8", choices=KV_CACHE_DTYPES)
    check.add_argument("--eval", help="JSONL eval set (default: the packaged one)")
    check.add_argument("--limit", type=int, help="ask only the first N questions")
    check.add_argument("--max-tokens", type=int, default=24)
    check.add_argument("--max-accuracy-drop", type=float, default=0.05, help="fraction (default 0.05 = 5 points)")
    check.add_argument("--min-agreement", type=float, default=0.0, help="minimum same-verdict share (default 0)")
    check.add_argument("--json", action="store_true")
    check.set_defaults(run=_guarded(_kv_check))


def _add_kv_lab(subparsers: Any) -> None:
    from backends.kv.lab import POLICIES

    lab = subparsers.add_parser("kv-lab", help="measure FP8 KV formats and KV pruning on the prepared model (torch)")
    lab.add_argument("--study", choices=("fp8", "pruning", "all"), default="all")
    lab.add_argument("--out", help="output directory (default: $KVGATE_HOME/kv-lab, read by kv-check)")
    lab.add_argument("--eval", help="JSONL eval set (default: the packaged one)")
    lab.add_argument("--eval-limit", type=int, help="use only the first N eval questions")
    lab.add_argument("--long-count", type=int, default=3, help="long inputs (default 3)")
    lab.add_argument("--long-words", type=int, default=750, help="words per long input (default 750, ~1k tokens)")
    lab.add_argument("--budgets", type=float, nargs="+", default=[0.2, 0.4, 0.6, 0.8], help="kept KV fractions")
    lab.add_argument("--policies", nargs="+", choices=POLICIES, help="pruning policies (default: all)")
    lab.add_argument("--tail", type=int, default=128, help="tokens scored after the pruned prefix (default 128)")
    lab.add_argument("--threads", type=int, help="torch threads (default: free CPUs)")
    lab.add_argument("--max-layers", type=int, help="truncate the model to N layers (quick runs)")
    lab.add_argument("--no-plots", action="store_true", help="skip the PNG plots (and the matplotlib install)")
    lab.set_defaults(run=_guarded(_kv_lab))
