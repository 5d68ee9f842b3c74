"""``kvgate sim``: run one or more simulated vLLM workers until SIGINT/SIGTERM.

``kvgate sim --port 8001`` serves one worker with the ``vllm-cpu`` preset; ``--count 4`` serves
four independent workers (own cache, queue, metrics and seed ``seed + i``) on ports 8001-8004 in
one process, which is how the testbed runs many workers on few cores. Engine shape, latency,
output length, reasoning profile and start-up faults can be overridden; see ``--help`` and
docs/sim.md. :func:`add_arguments` and :func:`run` are what ``gateway/cli.py`` wires in;
``python -m backends.sim`` calls them directly.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal

from backends.sim.faults import FaultSpecError, parse_fault
from backends.sim.latency import LatencyModel
from backends.sim.output import OutputLength, OutputPolicy
from backends.sim.presets import PRESETS, get_preset
from backends.sim.worker import SimConfig, SimWorker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``kvgate sim`` options to ``parser``."""
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind (default loopback)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port of the first worker")
    parser.add_argument("--count", type=int, default=1, help="workers on consecutive ports")
    parser.add_argument("--model", default="sim-model", help="served model name")
    parser.add_argument("--preset", default="vllm-cpu", choices=sorted(PRESETS),
                        help="engine shape and latency model (default vllm-cpu, fitted)")
    parser.add_argument("--num-blocks", type=int, help="KV cache capacity in blocks")
    parser.add_argument("--block-size", type=int, help="tokens per KV block")
    parser.add_argument("--max-num-seqs", type=int, help="most sequences in one batch")
    parser.add_argument("--max-num-batched-tokens", type=int, help="token budget of one step")
    parser.add_argument("--max-model-len", type=int, help="context length")
    parser.add_argument("--latency", metavar="FIXED,PREFILL_TOKEN,DECODE_SEQ[,ADMISSION[,PAIR]]",
                        help="step latency model in seconds, overriding the preset's")
    parser.add_argument("--output-len", default="max",
                        help="max | fixed:N | uniform:LO:HI | lognormal:MEDIAN:SIGMA")
    parser.add_argument("--default-max-tokens", type=int, default=256,
                        help="output length under 'max' when a request sets no max_tokens")
    parser.add_argument("--reasoning-fraction", type=float, default=0.0,
                        help="share of output tokens streamed as `reasoning` before content")
    parser.add_argument("--fault", action="append", default=[], metavar="SPEC",
                        help="worker-wide fault at start (repeatable), e.g. error:status=503,p=0.1")
    parser.add_argument("--seed", type=int, default=0, help="seed of ids, outputs and faults")
    parser.add_argument("--task", default="generate", choices=("generate", "embed"),
                        help="generate (chat, completions, responses, messages) or embed (/v1/embeddings)")
    parser.add_argument("--embedding-dim", type=int, default=384, help="vector length of an embed worker")
    parser.add_argument("--no-responses-store", dest="responses_store", action="store_false",
                        help="do not keep stored responses (vLLM without VLLM_ENABLE_RESPONSES_API_STORE)")


def parse_latency(text: str) -> LatencyModel:
    """``FIXED,PREFILL_TOKEN,DECODE_SEQ[,ADMISSION[,PAIR]]`` (seconds) -> :class:`LatencyModel`."""
    values = [float(v) for v in text.split(",")]
    if len(values) not in (3, 4, 5) or any(v < 0 for v in values):
        raise ValueError(f"--latency needs 3 to 5 non-negative numbers, got {text!r}")
    return LatencyModel(*values)


def build_configs(args: argparse.Namespace) -> list[SimConfig]:
    """One :class:`SimConfig` per worker from parsed options (pure; raises ``ValueError``)."""
    preset = get_preset(args.preset).with_overrides(
        num_blocks=args.num_blocks,
        block_size=args.block_size,
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        max_model_len=args.max_model_len,
        latency=parse_latency(args.latency) if args.latency else None,
    )
    length = OutputLength.parse(args.output_len, default_tokens=args.default_max_tokens)
    faults = tuple(parse_fault(spec) for spec in args.fault)
    if not 0.0 <= args.reasoning_fraction <= 1.0:
        raise ValueError("--reasoning-fraction must be within 0..1")
    if getattr(args, "embedding_dim", 384) < 1:
        raise ValueError("--embedding-dim must be at least 1")
    return [
        SimConfig(
            model=args.model,
            preset=preset,
            output=OutputPolicy(length, args.reasoning_fraction, args.seed + index),
            faults=faults,
            seed=args.seed + index,
            task=getattr(args, "task", "generate"),
            responses_store=getattr(args, "responses_store", True),
            embedding_dim=getattr(args, "embedding_dim", 384),
        )
        for index in range(args.count)
    ]


async def _serve_until_signalled(configs: list[SimConfig], host: str, port: int) -> None:
    workers = [SimWorker(config) for config in configs]
    from backends.sim.server import serve  # aiohttp: imported when a simulator runs, not by every `kvgate` command

    runners = await serve(workers, host, port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    preset = configs[0].preset
    for index, config in enumerate(configs):
        print(f"sim: {config.model!r} on http://{host}:{port + index}/v1 "
              f"(preset {preset.name}, {preset.num_blocks} blocks of {preset.block_size}, "
              f"seed {config.seed})", flush=True)
    try:
        await stop.wait()
    finally:
        for runner in runners:
            await runner.cleanup()


def run(args: argparse.Namespace) -> int:
    """Serve until SIGINT/SIGTERM; returns the exit status (2 on bad options)."""
    try:
        configs = build_configs(args)
    except (ValueError, KeyError, FaultSpecError) as exc:
        print(f"kvgate sim: {exc}")
        return 2
    runner = _event_loop_runner()
    with runner:
        runner.run(_serve_until_signalled(configs, args.host, args.port))
    return 0


def _event_loop_runner() -> asyncio.Runner:
    """An asyncio runner on uvloop when it is installed (about twice the streams per core)."""
    with contextlib.suppress(ImportError):
        import uvloop

        return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    return asyncio.Runner()
