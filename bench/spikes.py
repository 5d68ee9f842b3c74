"""Traffic spikes (issue 21): a load ramp of 0.5x..3x the local cluster's capacity through kvgate.

Processes (``bench/procs.py``): one simulator process with the **local** cluster's workers (the
``gpu-8b`` preset with a short batch, ``--max-num-seqs``, and a slower step, so capacity is a few
requests per second and the 2-core machine keeps up), one with the **managed** endpoint (a
slower, wider, pricier simulated cluster), and per row a fresh ``kvgate serve`` whose route is
``local`` then ``managed`` (the failover chain), two named keys (tenants) of equal weight.

1. **Capacity**, first: predicted from the preset (``slots * workers / service time``, service =
   one prefill step + ``max_tokens`` decode steps of a full batch), then measured: a closed loop
   of ``2 x slots`` streams straight at the local workers for a few seconds. The measured figure
   sets the ramp; both are printed.
2. **Rows**: ``none`` (today: no admission; the managed cluster only takes failures), ``queue``
   (``[admission]`` on, no spill target) and ``spill`` (``spill_to = ["managed"]``). The
   admission rows need the integrator's wiring of ``[admission]``: until ``Settings`` knows the
   section, kvgate refuses the config and the row prints that note instead of numbers.
   ``--gateway-config FILE`` appends any TOML to every row's config (e.g. to try other knobs).
3. **Columns** per load step: see ``bench/spikes_load.py``. TTFT SLOs: interactive 1.0 s,
   batch 4.0 s (``--slo-interactive``, ``--slo-batch``).

    python -m bench.spikes                 # all rows, 0.5x, 1x, 1.5x, 2x, 3x, 8 s each (~3.5 min)
    python -m bench.spikes --quick         # the 'none' row, 1x and 3x, 5 s each (< 1 min)
    python -m bench.spikes --rows none,spill --json
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

from backends.sim.presets import get_preset
from bench import procs
from bench.spikes_load import Traffic, format_table, ramp, summarise, to_json

MODEL = "sim-model"
ROWS = ("none", "queue", "spill")
KEYS = {"loud": "sk-bench-loud-0000000000000000", "quiet": "sk-bench-quiet-000000000000000"}
PRICES = {"local": (0.2, 0.6), "managed": (3.0, 15.0)}  # USD per 1M input, output tokens


@dataclass(frozen=True)
class Shape:
    """The simulated clusters (seconds per step: ``fixed + decode_seq * batch``)."""

    workers: int = 2
    seqs: int = 4
    step_s: float = 0.035
    managed_seqs: int = 64
    managed_step_s: float = 0.06
    max_tokens: int = 24

    def latency(self, fixed: float) -> str:
        return f"{fixed},0.00004,0.00006,0.002"

    def service_s(self) -> float:
        model = get_preset("gpu-8b").with_overrides().latency
        step = self.step_s + model.decode_seq_s * self.seqs
        return step + 40 * model.prefill_token_s + self.max_tokens * step

    def predicted_rps(self) -> float:
        return self.workers * self.seqs / self.service_s()


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.spikes", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated: none, queue, spill")
    parser.add_argument("--loads", default="0.5,1,1.5,2,3", help="load steps, multiples of capacity")
    parser.add_argument("--step-s", type=float, default=8.0, help="seconds per load step")
    parser.add_argument("--quick", action="store_true", help="row 'none', loads 1,3, 5 s steps")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seqs", type=int, default=4, help="local batch size (--max-num-seqs)")
    parser.add_argument("--max-queue-wait-s", type=float, default=0.75, help="the route's wait limit")
    parser.add_argument("--batch-max-queue-wait-s", type=float, default=3.0, help="batch requests' wait limit")
    parser.add_argument("--slo-interactive", type=float, default=1.0)
    parser.add_argument("--slo-batch", type=float, default=4.0)
    parser.add_argument("--capacity-rps", type=float, help="skip the measurement, use this")
    parser.add_argument("--gateway-config", type=Path, help="TOML appended to every row's kvgate config")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench/out"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.rows, args.loads, args.step_s = "none", "1,3", 5.0
    return args


def kvgate_config(port: int, local: list[str], managed: list[str], shape: Shape, row: str, wait_s: float,
                  batch_wait_s: float) -> str:
    """The row's kvgate TOML: clusters ``local`` and ``managed``, route ``spiky``, two keys."""
    lines = ["[server]", 'host = "127.0.0.1"', f"port = {port}", 'log_level = "warning"', "",
             "[health]", "interval_s = 1.0", ""]
    for name, urls, slots in (("local", local, shape.seqs), ("managed", managed, shape.managed_seqs)):
        price_in, price_out = PRICES[name]
        lines += [f"[clusters.{name}]", f"[clusters.{name}.price]", f"input_per_mtok = {price_in}",
                  f"output_per_mtok = {price_out}", f"[clusters.{name}.selection]",
                  f"slots_per_endpoint = {slots}", f"service_prior_s = {shape.service_s():.3f}", ""]
        for index, url in enumerate(urls):
            lines += [f"[[clusters.{name}.endpoints]]", f'name = "{name}-{index}"', f'url = "{url}/v1"',
                      f'model = "{MODEL}"', ""]
    lines += ["[routes.spiky]", 'clusters = ["local", "managed"]']
    if row != "none":
        lines += [f"max_queue_wait_s = {wait_s}"]
    if row == "spill":
        lines += ['spill_to = ["managed"]']
    lines += ["", f'[models.{MODEL}]', 'route = "spiky"', ""]
    for tenant, secret in KEYS.items():
        lines += ["[[auth.keys]]", f'name = "{tenant}"', f'key = "{secret}"', ""]
    if row != "none":
        lines += ["[admission]", "enabled = true", f"max_queue_wait_s = {wait_s}",
                  f"batch_max_queue_wait_s = {batch_wait_s}", ""]
        for tenant in KEYS:
            lines += [f"[admission.keys.{tenant}]", "weight = 1.0", "allow_priority_header = true", ""]
    return "\n".join(lines)


async def measure_capacity(origins: list[str], shape: Shape, seconds: float = 6.0) -> float:
    """Completed requests per second of a closed loop of ``2 * seqs`` streams per local worker."""
    done = 0
    stop = time.monotonic() + seconds
    warm = time.monotonic() + 1.0
    body = {"model": MODEL, "stream": True, "max_tokens": shape.max_tokens,
            "messages": [{"role": "user", "content": "capacity probe: say something"}]}

    async def loop(session: aiohttp.ClientSession, origin: str) -> None:
        nonlocal done
        while time.monotonic() < stop:
            async with session.post(f"{origin}/v1/chat/completions", json=body) as reply:
                await reply.read()
            if time.monotonic() > warm:
                done += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(loop(session, o) for o in origins for _ in range(2 * shape.seqs)))
    return done / (seconds - 1.0)


async def run_row(row: str, args: argparse.Namespace, shape: Shape, traffic: Traffic,
                  local: list[str], managed: list[str], port: int) -> list[dict]:
    """One row: a fresh kvgate with the row's config, the ramp, the summary per load step."""
    config = args.out / f"spikes-{row}.toml"
    text = kvgate_config(port, local, managed, shape, row, args.max_queue_wait_s, args.batch_max_queue_wait_s)
    if args.gateway_config is not None:
        text += "\n" + args.gateway_config.read_text()
    config.write_text(text)
    command = [sys.executable, "-m", "gateway.cli", "serve", "--config", str(config)]  # this checkout's gateway
    gateway = procs.start(f"spikes-kvgate-{row}", command, args.out / "logs")
    try:
        try:
            await procs.wait_gateway_endpoints(f"http://127.0.0.1:{port}", gateway, len(local) + len(managed))
        except RuntimeError:
            reason = _first_error(gateway.log)
            return [{"row": row, "note": f"not run: kvgate refused the config ({reason}); needs the "
                     "[admission] wiring"}]
        samples = await ramp(f"http://127.0.0.1:{port}", traffic)
    finally:
        gateway.stop()
    with (args.out / f"spikes-samples-{row}.jsonl").open("wb") as out:
        out.writelines(orjson.dumps(dataclasses.asdict(sample)) + b"\n" for sample in samples)
    return summarise(row, samples, traffic, "local", "managed")


def _first_error(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if "invalid configuration" in line:
            return " ".join(lines[index + 1:index + 3])[:140]
    return f"see {log}"


async def _main(args: argparse.Namespace) -> tuple[float, float, list[dict]]:
    shape = Shape(workers=args.workers, seqs=args.seqs)
    port = procs.free_port_block(args.workers + 3)
    local = [f"http://127.0.0.1:{port + i}" for i in range(args.workers)]
    managed = [f"http://127.0.0.1:{port + args.workers}"]
    logs = args.out / "logs"
    sims = procs.start("spikes-local", procs.sim_command(port, args.workers, "gpu-8b", MODEL, args.seed, [
        "--max-num-seqs", str(shape.seqs), "--latency", shape.latency(shape.step_s)]), logs)
    far = procs.start("spikes-managed", procs.sim_command(port + args.workers, 1, "gpu-8b", MODEL, args.seed + 100, [
        "--max-num-seqs", str(shape.managed_seqs), "--latency", shape.latency(shape.managed_step_s)]), logs)
    try:
        for origin in (*local, *managed):
            await procs.wait_ready(f"{origin}/health", sims if origin in local else far)
        measured = args.capacity_rps or await measure_capacity(local, shape)
        traffic = Traffic(
            capacity_rps=measured, loads=tuple(float(x) for x in args.loads.split(",")), step_s=args.step_s,
            max_tokens=shape.max_tokens, slo_s={"interactive": args.slo_interactive, "batch": args.slo_batch},
            prices=PRICES, keys=KEYS, model=MODEL, seed=args.seed,
        )
        rows: list[dict] = []
        for row in [r.strip() for r in args.rows.split(",") if r.strip()]:
            rows += await run_row(row, args, shape, traffic, local, managed, port + args.workers + 1)
    finally:
        sims.stop()
        far.stop()
    return shape.predicted_rps(), measured, rows


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    predicted, measured, rows = asyncio.run(_main(args))
    (args.out / "spikes.jsonl").write_text(to_json(rows) + "\n")
    print(f"local capacity: predicted {predicted:.2f} req/s from the preset, measured {measured:.2f} req/s "
          f"(ramp base); SLO TTFT interactive {args.slo_interactive} s, batch {args.slo_batch} s; "
          f"wait limit {args.max_queue_wait_s} s (batch {args.batch_max_queue_wait_s} s); "
          f"{time.monotonic() - started:.0f} s")
    print(to_json(rows) if args.json else format_table(rows))
    return 1 if any(row.get("lost") for row in rows) else 0


if __name__ == "__main__":
    raise SystemExit(main())
