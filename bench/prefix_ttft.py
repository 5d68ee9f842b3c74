"""Cold vs cached TTFT on a real vLLM-CPU worker, through kvgate and direct, in one run.

Starts one local vLLM-CPU worker (SmolLM2 with this host's default dtypes, ``backends.host``: FP8
KV where the CPU can serve it; ``--kv-cache-dtype`` and ``--dtype`` override; prefix caching; eager
mode) and kvgate in front of it. For each of N fresh ~1,000-token documents it streams one question cold, then a
different question over the same document (a prefix-cache hit), measuring TTFT as the time from
sending the request to the first chunk carrying content (seconds). Alternates kvgate and direct
per document so both see the same conditions. Then the prefill rate (cold prompt tokens / cold
TTFT, direct) and the decode rate of one direct 64-token greedy answer (tokens after the first /
time after the first). Prints a table; ``--json`` prints the rows.

    .venv/bin/python bench/prefix_ttft.py [--documents 6] [--kv-cache-dtype auto] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import openai  # noqa: E402

from tests.support.local_workers import LocalWorkerPool  # noqa: E402
from backends.workers.prepared import prepare_runtime  # noqa: E402
from gateway.app import create_app  # noqa: E402
from gateway.config import build_settings  # noqa: E402
from tests.support.threads import ServerThread  # noqa: E402


def document(tag: str) -> str:
    facts = " ".join(f"Fact {i}: the {tag} warehouse stores {i * 7} crates of item {i}." for i in range(36))
    return f"Reference document {tag}.\n{facts}\n"


async def ttft(client: openai.AsyncOpenAI, doc: str, question: str) -> tuple[float, int, int]:
    started = time.perf_counter()
    first = None
    usage = None
    stream = await client.chat.completions.create(
        model="smollm2",
        messages=[{"role": "system", "content": doc}, {"role": "user", "content": question}],
        temperature=0,
        max_tokens=4,
        stream=True,
        stream_options={"include_usage": True},
    )
    async for chunk in stream:
        if first is None and chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() - started
        usage = chunk.usage or usage
    assert first is not None and usage is not None
    cached = usage.prompt_tokens_details.cached_tokens if usage.prompt_tokens_details else 0
    return first, usage.prompt_tokens, cached or 0


async def decode_rate(client: openai.AsyncOpenAI, tokens: int = 64) -> float:
    """Tokens per second after the first, for one greedy answer of ``tokens`` tokens."""
    stream = await client.chat.completions.create(
        model="smollm2", messages=[{"role": "user", "content": "Tell me a long story about a cat."}],
        temperature=0, max_tokens=tokens, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True})
    first = last = None
    usage = None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            first = time.perf_counter() if first is None else first
            last = time.perf_counter()
        usage = chunk.usage or usage
    assert first is not None and last is not None and usage is not None and last > first
    return (usage.completion_tokens - 1) / (last - first)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--documents", type=int, default=6)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--kv-cache-dtype", help="default: this host's choice (backends.host)")
    parser.add_argument("--dtype", help="model dtype, e.g. bfloat16 or float32 (default: this host's choice)")
    parser.add_argument("--start-timeout", type=float, default=900.0, help="seconds for the worker to become healthy")
    args = parser.parse_args()
    overrides = {"dtype": args.dtype} if args.dtype else None
    runtime = await asyncio.to_thread(prepare_runtime, log=lambda line: None)
    async with LocalWorkerPool(runtime, 1, enforce_eager=True, kv_cache_dtype=args.kv_cache_dtype, overrides=overrides,
                               healthy_timeout_s=args.start_timeout,
                               log=lambda line: print(f"[bench] {line}", file=sys.stderr)) as pool:
        worker = pool.workers[0]
        settings = build_settings(
            {"clusters": {"fast": {"endpoints": [{"url": worker.base_url, "model": "smollm2"}]}}, "models": {"smollm2": {"cluster": "fast"}}}
        )
        gateway = ServerThread.uvicorn(create_app(settings))
        gateway.start()
        targets = {
            "kvgate": openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{gateway.port}/v1", api_key="x", max_retries=0),
            "direct": openai.AsyncOpenAI(base_url=worker.base_url, api_key="x", max_retries=0),
        }
        samples: dict[tuple[str, str], list[float]] = {}
        prompt_tokens = cached_tokens = 0
        try:
            await ttft(targets["direct"], document("warmup"), "Hi?")
            for index in range(args.documents):
                for name in (("kvgate", "direct") if index % 2 == 0 else ("direct", "kvgate")):
                    doc = document(uuid.uuid4().hex[:8])
                    cold, prompt_tokens, _ = await ttft(targets[name], doc, "How many crates of item 3?")
                    warm, _, cached_tokens = await ttft(targets[name], doc, "How many crates of item 5?")
                    samples.setdefault((name, "cold"), []).append(cold)
                    samples.setdefault((name, "cached"), []).append(warm)
            decode = await decode_rate(targets["direct"])
        finally:
            for client in targets.values():
                await client.close()
            gateway.stop()
    rows = [
        {"target": name, "prefix": kind, "ttft_p50_s": statistics.median(values), "ttft_min_s": min(values), "ttft_max_s": max(values), "n": len(values)}
        for (name, kind), values in sorted(samples.items())
    ]
    prefill = prompt_tokens / statistics.median(samples[("direct", "cold")])
    spec = worker.spec
    if args.json:
        print(json.dumps({"kv_cache_dtype": spec.kv_cache_dtype, "dtype": spec.dtype or "auto", "rows": rows,
                          "prefill_tok_s": prefill, "decode_tok_s": decode}, indent=2))
        return 0
    print(f"SmolLM2-135M on vLLM-CPU (--kv-cache-dtype {spec.kv_cache_dtype}, --dtype {spec.dtype or 'auto'}, eager), "
          f"prompt {prompt_tokens} tokens, cached {cached_tokens} tokens on the repeat")
    print(f"prefill {prefill:.0f} tokens/s (cold, direct, p50), decode {decode:.1f} tokens/s (64-token answer)")
    print(f"{'target':<8}{'prefix':<8}{'TTFT p50 s':>12}{'min':>8}{'max':>8}{'n':>4}")
    for row in rows:
        print(f"{row['target']:<8}{row['prefix']:<8}{row['ttft_p50_s']:>12.3f}{row['ttft_min_s']:>8.3f}{row['ttft_max_s']:>8.3f}{row['n']:>4}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
