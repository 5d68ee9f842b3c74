"""[io] The overhead benchmark's long-prompt phase (``--long-prompts``): added latency and kvgate's loop lag.

For each prompt size (``--long-sizes``, default 32 KB, 200 KB and 1 MB) and concurrency
(``--long-concurrency``, default 1, 32, 128), every running target gets ``--long-seconds`` of
closed-loop non-streaming load whose prompts are each unique from their first byte (as the
memory check's distinct prompts: every prefix block is new to the gateway, no memo helps). The
fake upstream answers at once, so a request's latency is its time to first token plus the
transfer of the answer; "added" is a target's p50 (p99) minus ``direct``'s at the same size and
concurrency, in the same round.

Loop lag is kvgate's own figure, read from its ``GET /metrics``: the histogram
``kvgate_event_loop_lag_seconds`` scraped before and after each load (its p99 is the upper bound
of the bucket holding the 99th percentile of the ticks in that window) and the gauge
``kvgate_event_loop_lag_max_seconds`` (the worst tick of the monitor's recent window, read after
the load). The monitor is the gateway's when its app runs one, else the benchmark's launcher
starts one on the app's instruments (``KVGATE_BENCH_LOOP_LAG``, ticks of 2 ms; see
``targets._LAUNCHER``). A target without those instruments shows ``-``.

Every function returns plain dicts (the JSON record keeps them as they are).
"""

from __future__ import annotations

import math
import time
import urllib.request
import uuid
from typing import Any

from bench.overhead import load, targets
from bench.overhead.proctree import CpuWindow

LAG_HISTOGRAM = "kvgate_event_loop_lag_seconds_bucket"
LAG_MAX = "kvgate_event_loop_lag_max_seconds"


def metrics_url(target: targets.Target) -> str:
    """``http://HOST:PORT/metrics`` of a target whose URL is ``.../v1/chat/completions``."""
    return target.url.split("/v1/", 1)[0] + "/metrics"


def scrape_lag(target: targets.Target) -> dict[str, Any] | None:
    """``{"buckets": {le: count}, "max_s": gauge}`` from the target's /metrics, or None."""
    try:
        with urllib.request.urlopen(metrics_url(target), timeout=5) as response:
            text = response.read().decode()
    except (OSError, ValueError):
        return None
    buckets: dict[float, float] = {}
    maximum = None
    for line in text.splitlines():
        if line.startswith(LAG_HISTOGRAM + "{"):
            labels, _, value = line.rpartition(" ")
            bound = labels.split('le="', 1)[1].split('"', 1)[0]
            buckets[math.inf if bound == "+Inf" else float(bound)] = float(value)
        elif line.startswith(LAG_MAX + " "):
            maximum = float(line.rsplit(" ", 1)[1])
    if not buckets:
        return None
    return {"buckets": buckets, "max_s": maximum}


def lag_between(before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    """The window's ticks, the bucket bound of their p99 (ms) and the window gauge's max (ms)."""
    if before is None or after is None:
        return {"ticks": None, "p99_ms_le": None, "max_ms": None}
    counts = {bound: after["buckets"][bound] - before["buckets"].get(bound, 0.0) for bound in after["buckets"]}
    total = counts.get(math.inf, 0.0)
    p99 = None
    if total > 0:
        p99 = next(bound for bound in sorted(counts) if counts[bound] >= 0.99 * total)
    return {
        "ticks": int(total),
        "p99_ms_le": None if p99 is None else (math.inf if p99 == math.inf else p99 * 1e3),
        "max_ms": None if after["max_s"] is None else after["max_s"] * 1e3,
    }


def measure(target: targets.Target, args: Any, size: int, concurrency: int) -> dict[str, Any]:
    """One load of ``size``-byte unique prompts at ``concurrency`` on ``target``, with its lag."""
    from bench.overhead.run import settle  # the run module imports this one

    settle(target)
    before = scrape_lag(target)
    window = CpuWindow(target.roots)
    window.start()
    result = load.run_load(
        target.url, target.headers, concurrency=concurrency, seconds=args.long_seconds, cores=args.load,
        loadgen=args.loadgen, unique_prompt_bytes=size, tag=uuid.uuid4().hex[:10],
    )
    cpu = window.stop()
    served = result["requests"] or 0
    result["cpu_us_per_request"] = cpu / served * 1e6 if served else None
    time.sleep(0.1)  # the monitor publishes its gauges every 20 ticks (40 ms)
    result["lag"] = lag_between(before, scrape_lag(target))
    return result


def long_prompt_phase(running: dict[str, targets.Target], args: Any, log: Any) -> dict[str, Any]:
    """``{target: {"SIZE/cC": result}}`` for every running target, sizes and concurrencies."""
    out: dict[str, Any] = {name: {} for name in running}
    for size in args.long_sizes:
        for concurrency in args.long_concurrencies:
            for name, target in running.items():
                if target.procs and not all(proc.alive() for proc in target.procs):
                    continue
                try:
                    result = measure(target, args, size, concurrency)
                except Exception as error:  # noqa: BLE001 - a failing target must not stop the others
                    log(f"long prompts {name} {size} B c={concurrency}: failed: {error}")
                    continue
                out[name][f"{size}/c{concurrency}"] = result
                lag = result["lag"]
                log(
                    f"long prompts {name:<14} {size // 1000:>5} KB c={concurrency:<4} p50 {result['p50_ms'] or 0:8.2f} ms  "
                    f"p99 {result['p99_ms'] or 0:8.2f} ms  {result['requests_per_s']:7.0f} req/s"
                    + (f"  loop lag max {lag['max_ms']:.1f} ms" if lag["max_ms"] is not None else "")
                    + (f"  errors {result['errors']}" if result["errors"] else "")
                )
    return out


def _fmt(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return "inf" if value == math.inf else f"{value:.{digits}f}"


def table(record: dict[str, Any]) -> str:
    """The phase's table: per target, size and concurrency, added p50/p99 against ``direct`` and the loop lag."""
    phase = record.get("long_prompts") or {}
    direct = phase.get("direct", {})
    lines = [
        "\nLong prompts (unique prompts, non-streaming; added = target - direct, ms; loop lag from the target's /metrics, ms)",
        (f"{'target':<16}{'prompt':>9}{'c':>5}{'p50':>9}{'p99':>9}{'added p50':>11}{'added p99':>11}"
         f"{'req/s':>8}{'CPU us/req':>11}{'lag max':>9}{'lag p99<=':>10}{'errors':>8}"),
    ]
    for name, results in phase.items():
        for key, result in results.items():
            size, concurrency = key.split("/c")
            base = direct.get(key)
            added50 = added99 = None
            if base and name != "direct" and result["p50_ms"] is not None and base["p50_ms"] is not None:
                added50 = result["p50_ms"] - base["p50_ms"]
                added99 = (result["p99_ms"] or 0) - (base["p99_ms"] or 0)
            lag = result.get("lag") or {}
            lines.append(
                f"{name:<16}{int(size) // 1000:>7}KB{concurrency:>5}{_fmt(result['p50_ms']):>9}{_fmt(result['p99_ms']):>9}"
                f"{_fmt(added50):>11}{_fmt(added99):>11}{result['requests_per_s']:>8.0f}"
                f"{_fmt(result.get('cpu_us_per_request'), 0):>11}{_fmt(lag.get('max_ms'), 1):>9}"
                f"{_fmt(lag.get('p99_ms_le'), 1):>10}{result['errors']:>8}"
            )
    return "\n".join(lines)
