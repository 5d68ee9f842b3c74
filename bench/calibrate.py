"""Calibration: fit the ``vllm-cpu`` latency model to the real vLLM-CPU worker, then check it.

Two phases, each against **one** real worker (``tests.support.local_workers.LocalWorkerPool``, stopped at the
end) and then against one simulated worker serving the same model name:

1. ``--fit`` (real worker only): probes with streaming requests, one at a time unless stated:

   - *cold prefill*: prompts of about 130 .. 1,230 tokens, ``max_tokens=1``, three texts each;
   - *warm prefill*: each of those prompts again: vLLM hits its whole blocks, so ``n`` tokens are
     computed after ``c`` cached ones;
   - least squares over both: ``TTFT = A + prefill_token_s * n + attention_pair_s * pairs(n, c)``
     (:func:`backends.sim.latency.attention_pairs`);
   - *decode*: B = 1, 4 and 8 concurrent streams of 48 tokens; the median gap between chunks
     after the 4th token is one step: ``ITL - attention = fixed_s + decode_seq_s * B``;
   - ``admission_s = A - fixed_s`` (API-server time outside engine steps), floored at 0.

   It prints the fitted :class:`~backends.sim.latency.LatencyModel` (paste into
   ``backends/sim/presets.py``) and uses it for phase 2.
2. *validation*: the ``calibration`` workload profile (tenants with long system prompts, document
   Q&A, cold prompts; all under the 2,048-token context), replayed sequentially against the real
   worker and against the simulator, ``--passes`` times each (every pass with a fresh
   ``cache_salt``, so it starts cold again); each request's TTFT is its median over the passes,
   which keeps a noisy neighbour on a shared machine from deciding the result. Requests are split
   **cold** (``cached_tokens == 0``) and **warm** (``cached_tokens > 0``) by each server's own
   usage; the report gives TTFT p50 of each class on both sides and their ratio, and passes when
   both are within 25%.

    python -m bench.calibrate --fit          # about 2 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import aiohttp

from backends.sim.latency import LatencyModel, attention_pairs
from backends.sim.presets import VLLM_CPU
from bench import procs
from bench.replay import ReplayResult, RequestResult, replay_sequential
from bench.trace import TraceRequest, percentile
from bench.workload import PROFILES, WORDS, generate

TOLERANCE = 0.25


def fit_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """Least-squares ``y = a + b x``; returns ``(a, b)``."""
    a, b = least_squares([[1.0, x] for x in xs], ys)
    return a, b


def least_squares(rows: Sequence[Sequence[float]], ys: Sequence[float]) -> list[float]:
    """Ordinary least squares by the normal equations (small, well-conditioned problems)."""
    k = len(rows[0])
    matrix = [[sum(r[i] * r[j] for r in rows) for j in range(k)]
              + [sum(r[i] * y for r, y in zip(rows, ys, strict=True))] for i in range(k)]
    for col in range(k):
        pivot = max(range(col, k), key=lambda r: abs(matrix[r][col]))
        matrix[col], matrix[pivot] = matrix[pivot], matrix[col]
        if matrix[col][col] == 0:
            raise ValueError("singular least-squares problem")
        for row in range(k):
            if row != col:
                factor = matrix[row][col] / matrix[col][col]
                matrix[row] = [a - factor * b for a, b in zip(matrix[row], matrix[col], strict=True)]
    return [matrix[i][k] / matrix[i][i] for i in range(k)]


def _text(seed: int, words: int) -> str:
    """A unique text of ``words`` common words (a cold prompt for each seed)."""
    rng = random.Random(f"probe:{seed}")
    return " ".join(rng.choices(WORDS, k=words))


@dataclass(frozen=True)
class Probe:
    """One streamed probe: prompt and cached tokens, chunk arrival times from the send."""

    prompt: int
    cached: int
    times: tuple[float, ...]


async def _probe(session: aiohttp.ClientSession, base: str, model: str, content: str,
                 max_tokens: int) -> Probe:
    body = {"model": model, "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens, "stream": True, "stream_options": {"include_usage": True},
            "ignore_eos": True}
    sent, times, usage = time.monotonic(), [], {}
    async with session.post(f"{base}/v1/chat/completions", json=body) as reply:
        async for raw in reply.content:
            line = raw.strip()
            if not line.startswith(b"data: {"):
                continue
            event = json.loads(line[6:])
            usage = event.get("usage") or usage
            if any((c.get("delta") or {}).get("content") for c in event.get("choices") or ()):
                times.append(time.monotonic() - sent)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    return Probe(usage.get("prompt_tokens", 0), cached, tuple(times))


async def _prefill_probes(session: aiohttp.ClientSession, base: str, model: str) -> list[Probe]:
    probes = []
    for size in (100, 300, 600, 900, 1200):
        for rep in range(3):
            text = _text(size * 10 + rep, size)
            probes.append(await _probe(session, base, model, text, 1))
            probes.append(await _probe(session, base, model, text, 1))
    return probes


async def fit(base: str, model: str) -> tuple[LatencyModel, dict]:
    """Probe a real worker and fit the latency model (see module docstring)."""
    async with aiohttp.ClientSession() as session:
        for i in range(3):  # warm-up: first requests pay one-off costs
            await _probe(session, base, model, _text(900 + i, 200), 4)
        prefill = await _prefill_probes(session, base, model)
        decode: list[tuple[int, float, float]] = []
        for batch in (1, 4, 8):
            runs = await asyncio.gather(*(_probe(session, base, model, _text(50 + b, 40), 48)
                                          for b in range(batch)))
            gaps = [p.times[i + 1] - p.times[i] for p in runs for i in range(4, len(p.times) - 1)]
            context = statistics.fmean(p.prompt + 24 for p in runs)
            decode.append((batch, context, statistics.median(gaps)))
    rows = [[1.0, p.prompt - p.cached, attention_pairs(p.prompt - p.cached, p.cached)]
            for p in prefill]
    intercept, per_token, per_pair = least_squares(rows, [p.times[0] for p in prefill])
    per_pair = max(per_pair, 0.0)
    fixed, per_seq = fit_line([b for b, _, _ in decode],
                              [itl - per_pair * b * (c + 1) for b, c, itl in decode])
    model_fit = LatencyModel(
        fixed_s=round(fixed, 5), prefill_token_s=round(per_token, 7),
        decode_seq_s=round(max(per_seq, 0.0), 6), admission_s=round(max(intercept - fixed, 0.0), 5),
        attention_pair_s=float(f"{per_pair:.3g}"))
    points = {"prefill": [(p.prompt, p.cached, round(p.times[0], 4)) for p in prefill],
              "decode": [(b, round(c), round(itl, 5)) for b, c, itl in decode]}
    return model_fit, points


@dataclass(frozen=True)
class Side:
    """TTFT p50 (ms) of cold and warm requests as one server classified them."""

    cold_p50_ms: float
    warm_p50_ms: float
    cold: int
    warm: int


async def replay_passes(base_url: str, model: str, requests: Sequence[TraceRequest],
                        passes: int) -> ReplayResult:
    """Sequential replays with a fresh ``cache_salt`` each; per-request median TTFT."""
    runs = [await replay_sequential(base_url, model, requests, extra_body={"cache_salt": f"p{i}"})
            for i in range(passes)]
    merged = []
    for results in zip(*(run.results for run in runs), strict=True):
        ttfts = [r.ttft for r in results if r.ok and r.ttft is not None]
        first = results[0]
        merged.append(replace(first, ttft=statistics.median(ttfts) if ttfts else None,
                              ok=all(r.ok for r in results)))
    return ReplayResult(tuple(merged), sum(run.wall_s for run in runs))


def summarise(result: ReplayResult) -> Side:
    ok = [r for r in result.results if r.ok and r.ttft is not None]
    cold = [r.ttft for r in ok if r.cached_tokens == 0]
    warm = [r.ttft for r in ok if r.cached_tokens > 0]
    return Side(round(percentile(cold, 0.5) * 1000, 1), round(percentile(warm, 0.5) * 1000, 1),
                len(cold), len(warm))


async def _real(requests: Sequence[TraceRequest], do_fit: bool,
                passes: int) -> tuple[ReplayResult, LatencyModel | None, dict]:
    from tests.support.local_workers import LocalWorkerPool
    from backends.workers.prepared import prepare_runtime

    runtime = prepare_runtime()
    async with LocalWorkerPool(runtime, 1, enforce_eager=True) as pool:
        base = pool.workers[0].origin
        fitted, points = await fit(base, runtime.served_model_name) if do_fit else (None, {})
        result = await replay_passes(f"{base}/v1", runtime.served_model_name, requests, passes)
    return result, fitted, points


async def _sim(requests: Sequence[TraceRequest], model: str, latency: LatencyModel,
               out: Path, passes: int) -> ReplayResult:
    port = procs.free_port_block(1)
    spec = ",".join(str(v) for v in (latency.fixed_s, latency.prefill_token_s, latency.decode_seq_s,
                                     latency.admission_s, latency.attention_pair_s))
    child = procs.start("calibration-sim", procs.sim_command(
        port, 1, "vllm-cpu", model, 0, ["--latency", spec]), out / "logs")
    try:
        await procs.wait_ready(f"http://127.0.0.1:{port}/health", child)
        return await replay_passes(f"http://127.0.0.1:{port}/v1", model, requests, passes)
    finally:
        child.stop()


def _pair(real: RequestResult, sim: RequestResult) -> dict[str, object]:
    """One validation request on both sides: (prompt, cached, TTFT ms)."""
    def side(r: RequestResult) -> list[object]:
        return [r.prompt_tokens, r.cached_tokens, round((r.ttft or 0.0) * 1000, 1)]
    return {"kind": real.kind, "real": side(real), "sim": side(sim)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.calibrate", description=__doc__.split("\n")[0])
    parser.add_argument("--fit", action="store_true", help="fit the latency model first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--passes", type=int, default=3, help="replays per side (median TTFT)")
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    args = parser.parse_args(argv)
    requests = generate(replace(PROFILES["calibration"], seed=args.seed)).requests
    real, fitted, points = asyncio.run(_real(requests, args.fit, args.passes))
    latency = fitted or VLLM_CPU.latency
    sim = asyncio.run(_sim(requests, "smollm2", latency, args.out, args.passes))
    real_side, sim_side = summarise(real), summarise(sim)
    ratios = {"cold": sim_side.cold_p50_ms / real_side.cold_p50_ms,
              "warm": sim_side.warm_p50_ms / real_side.warm_p50_ms}
    report = {"latency": asdict(latency), "fit_points": points,
              "requests": [_pair(r, m) for r, m in zip(real.results, sim.results, strict=True)],
              "real": asdict(real_side),
              "sim": asdict(sim_side), "sim_over_real": {k: round(v, 3) for k, v in ratios.items()},
              "within_25pct": all(abs(v - 1) <= TOLERANCE for v in ratios.values())}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "calibration.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))
    return 0 if report["within_25pct"] else 1


if __name__ == "__main__":
    sys.exit(main())
