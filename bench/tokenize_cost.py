"""What prompt tokens cost at routing time: a worker's ``POST /tokenize`` vs an in-process tokenizer.

Precise mode (``gateway/scheduling/tokens.py``) needs the prompt's token ids before it routes.
This prints, for chat prompts of about 250, 1,000 and 1,900 tokens (SmolLM2's template):

- ``/tokenize``: the round trip to a running vLLM worker (``--origin``), as the ``tokenize``
  producer does it (one pooled aiohttp session), sequentially, p50/p99/max in ms;
- ``in-process``: Hugging Face ``transformers``' ``apply_chat_template(tokenize=True)`` on the
  same messages, timed in the **worker's** interpreter (the gateway's has no tokenizer), p50/p99
  in ms, and whether its ids equal the worker's.

    .venv/bin/python -m bench.tokenize_cost [--origin http://127.0.0.1:PORT] [--rounds 200]

Without ``--origin`` it starts one local worker (``LocalWorkerPool``, about 30-60 s) and stops it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

from bench.trace import percentile
from gateway.protocol.openai import Operation
from gateway.scheduling.tokens import TokenizeClient, tokenize_body

HOME = Path(os.environ.get("KVGATE_HOME", Path.home() / ".cache" / "kvgate"))
SIZES = {"short": 20, "medium": 80, "long": 150}  # facts in the system prompt (tokens: printed)

IN_PROCESS = """
import json, sys, time
from transformers import AutoTokenizer
cases, rounds = json.loads(sys.stdin.read()), int(sys.argv[2])
tok = AutoTokenizer.from_pretrained(sys.argv[1])
out = {}
for name, messages in cases.items():
    times = []
    for _ in range(rounds):
        t = time.perf_counter(); ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        times.append(time.perf_counter() - t)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids  # a BatchEncoding in transformers 5
    out[name] = {"times": times, "ids": list(ids)}
print(json.dumps(out))
"""


def messages(facts: int) -> list[dict[str, str]]:
    system = " ".join(f"Fact {i}: the depot keeps {i * 7} crates of item {i}." for i in range(facts))
    return [{"role": "system", "content": system}, {"role": "user", "content": "How many crates of item 3?"}]


def ms(values: list[float], q: float) -> float:
    return round(percentile(values, q) * 1000, 2)


async def remote(origin: str, rounds: int) -> dict[str, tuple[list[float], list[int]]]:
    client = TokenizeClient()
    out = {}
    try:
        for name, facts in SIZES.items():
            body = tokenize_body({"messages": messages(facts)}, Operation.CHAT, "smollm2")
            assert body is not None
            await client(f"{origin}/tokenize", body, 30)  # connection set up
            times, ids = [], []
            for _ in range(rounds):
                started = time.perf_counter()
                ids = await client(f"{origin}/tokenize", body, 30)
                times.append(time.perf_counter() - started)
            out[name] = (times, ids)
    finally:
        await client.aclose()
    return out


async def own_worker(rounds: int) -> dict[str, tuple[list[float], list[int]]]:
    from backends.workers.prepared import prepare_runtime
    from tests.support.local_workers import LocalWorkerPool

    runtime = await asyncio.to_thread(prepare_runtime, log=lambda line: None)
    async with LocalWorkerPool(runtime, 1, log=lambda line: None) as pool:
        return await remote(pool.workers[0].origin, rounds)


def in_process(rounds: int) -> dict[str, dict]:
    cases = {name: messages(facts) for name, facts in SIZES.items()}
    python = HOME / "worker-venv" / "bin" / "python"
    model = HOME / "models" / "SmolLM2-135M-Instruct"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)
    done = subprocess.run([str(python), "-c", IN_PROCESS, str(model), str(rounds)], input=json.dumps(cases),
                          capture_output=True, text=True, env=env, check=True, timeout=600)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tokenize_cost", description=__doc__.split("\n")[0])
    parser.add_argument("--origin", help="a running vLLM worker, http://host:port (default: start one)")
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args(argv)
    served = asyncio.run(remote(args.origin, args.rounds) if args.origin else own_worker(args.rounds))
    local = in_process(args.rounds)
    print(f"{'prompt':<8}{'tokens':>7}{'/tokenize p50':>15}{'p99':>8}{'max':>8}{'in-process p50':>16}{'p99':>8}"
          f"{'same ids':>10}")
    for name, (times, ids) in served.items():
        mine = local[name]
        print(f"{name:<8}{len(ids):>7}{ms(times, 0.5):>15}{ms(times, 0.99):>8}{round(max(times) * 1000, 2):>8}"
              f"{ms(mine['times'], 0.5):>16}{ms(mine['times'], 0.99):>8}{str(mine['ids'] == ids):>10}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
