"""Summaries, the budget check and the printed tables of an overhead run (pure: dicts in, text out).

Spread: every figure is the median over rounds; CPU time per request also shows min-max.
"Added" figures are paired: a target's p50 minus ``direct``'s p50 *in the same round*, then the
median of those differences (the rounds alternate targets, so slow drifts of a shared machine
cancel out better than with medians taken apart).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

CONCURRENCIES = (1, 32, 128)

# kvgate's targets from issue 7 (the gateway's default routing profile, one core)
BUDGET_CPU_US = 150.0
BUDGET_ADDED_P50_C1_MS = 0.3
BUDGET_ADDED_TTFB_MS = 1.0
BUDGET_RSS_MB = 250.0

# issue 18: after a refactor, kvgate's CPU per request at c=32 within 5% of the code before it
BASELINE = "kvgate-base"
BASELINE_CPU_RATIO = 1.05


def _median(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return statistics.median(present) if present else None


def _spread(values: Iterable[float | None]) -> dict[str, float | None]:
    present = [value for value in values if value is not None]
    if not present:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(present), "min": min(present), "max": max(present)}


def _added(rounds: Sequence[Mapping[str, Any]], direct: Sequence[Mapping[str, Any]], phase: str, key: str) -> float | None:
    by_round = {run["round"]: run for run in direct}
    diffs = []
    for run in rounds:
        base = by_round.get(run["round"])
        if base is None:
            continue
        mine, theirs = run.get(phase, {}).get(key), base.get(phase, {}).get(key)
        if mine is not None and theirs is not None:
            diffs.append(mine - theirs)
    return _median(diffs)


def summarize(record: Mapping[str, Any], gateway_cores: int) -> dict[str, Any]:
    """Per-target summary over rounds (adds ``summary`` next to ``rounds``)."""
    direct = record["targets"].get("direct", {}).get("rounds", [])
    out: dict[str, Any] = {}
    for name, target in record["targets"].items():
        rounds = target.get("rounds", [])
        if not rounds:
            continue
        summary: dict[str, Any] = {}
        for c in CONCURRENCIES:
            phase = f"c{c}"
            runs = [run[phase] for run in rounds if phase in run]
            if not runs:
                continue
            rps = _median(run["requests_per_s"] for run in runs)
            summary[phase] = {
                "requests_per_s": rps,
                "requests_per_s_per_gateway_core": None if rps is None else rps / gateway_cores,
                "p50_ms": _median(run["p50_ms"] for run in runs),
                "p99_ms": _median(run["p99_ms"] for run in runs),
                "added_p50_ms": None if name == "direct" else _added(rounds, direct, phase, "p50_ms"),
                "cpu_us_per_request": _spread(run.get("cpu_us_per_request") for run in runs),
                "errors": sum(run.get("errors", 0) for run in runs),
            }
        streams = [run["stream"] for run in rounds if "stream" in run]
        if streams:
            summary["stream"] = {
                "ttfb_p50_ms": _median(run["ttfb_p50_ms"] for run in streams),
                "ttfb_p99_ms": _median(run["ttfb_p99_ms"] for run in streams),
                "total_p50_ms": _median(run["total_p50_ms"] for run in streams),
                "added_ttfb_p50_ms": None if name == "direct" else _added(rounds, direct, "stream", "ttfb_p50_ms"),
                "cpu_us_per_stream": _spread(run.get("cpu_us_per_request") for run in streams),
                "errors": sum(run.get("errors", 0) for run in streams),
            }
        summary["rss_mb_after_load"] = max((run.get("rss_mb") or 0.0) for run in rounds)
        cpu32 = summary.get("c32", {}).get("cpu_us_per_request", {}).get("median")
        summary["requests_per_cpu_second"] = None if not cpu32 else 1e6 / cpu32
        out[name] = summary
    return out


def budgets(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    """kvgate's numbers from issue 7, measured: [{check, budget, measured, ok}]."""
    kvgate = record["targets"].get("kvgate", {})
    summary = kvgate.get("summary", {})
    memory = kvgate.get("memory", {})
    checks: list[dict[str, Any]] = []

    def add(check: str, budget: str, measured: float | None, ok: bool | None, unit: str) -> None:
        checks.append({"check": check, "budget": budget, "measured": measured, "unit": unit, "ok": ok})

    cpu = summary.get("c32", {}).get("cpu_us_per_request", {}).get("median")
    add("CPU time per proxied request (c=32, one core)", f"<= {BUDGET_CPU_US:.0f} us", cpu,
        None if cpu is None else cpu <= BUDGET_CPU_US, "us")
    added = summary.get("c1", {}).get("added_p50_ms")
    add("added p50 latency at concurrency 1", f"<= {BUDGET_ADDED_P50_C1_MS} ms", added,
        None if added is None else added <= BUDGET_ADDED_P50_C1_MS, "ms")
    ttfb = summary.get("stream", {}).get("added_ttfb_p50_ms")
    add("added streaming time to first byte, p50", f"<= {BUDGET_ADDED_TTFB_MS} ms", ttfb,
        None if ttfb is None else ttfb <= BUDGET_ADDED_TTFB_MS, "ms")
    streams = memory.get("streams", {})
    rss = streams.get("rss_open_mb")
    full = streams.get("opened") == streams.get("requested")
    count = f"{streams['requested']:,}" if streams.get("requested") else "many"
    add(f"RSS with {count} concurrent streams open (all opened)", f"< {BUDGET_RSS_MB:.0f} MB", rss,
        None if rss is None else rss < BUDGET_RSS_MB and full, "MB")
    prompts = memory.get("prompts", {})
    end = prompts.get("rss_end_mb")
    if end is not None:
        first, second = prompts.get("growth_first_half_mb", 0.0), prompts.get("growth_second_half_mb", 0.0)
        flat = second <= max(8.0, 0.25 * first)
        add(f"RSS after {prompts.get('sent', 0):,} distinct prompts (flat in the second half)",
            f"< {BUDGET_RSS_MB:.0f} MB, flat", end, end < BUDGET_RSS_MB and flat, "MB")
    else:
        add("RSS after many distinct prompts", f"< {BUDGET_RSS_MB:.0f} MB, flat", None, None, "MB")
    return checks


def _ratio(mine: float | None, theirs: float | None) -> float | None:
    return None if mine is None or not theirs else mine / theirs


def _diff(mine: float | None, theirs: float | None) -> float | None:
    return None if mine is None or theirs is None else mine - theirs


def _paired_ratios(mine: Sequence[Mapping[str, Any]], theirs: Sequence[Mapping[str, Any]], phase: str) -> list[float]:
    """kvgate's CPU us/request over kvgate-base's in the same round, round by round."""
    by_round = {run["round"]: run for run in theirs}
    ratios = []
    for run in mine:
        base = by_round.get(run["round"], {}).get(phase, {}).get("cpu_us_per_request")
        ratio = _ratio(run.get(phase, {}).get("cpu_us_per_request"), base)
        if ratio is not None:
            ratios.append(ratio)
    return ratios


def compare(record: Mapping[str, Any]) -> dict[str, Any]:
    """kvgate (this tree) against kvgate-base (``--baseline-tree``) from their summaries.

    Ratios are kvgate / kvgate-base (CPU: > 1 costs more; req/s: > 1 serves more); ``*_diff``
    are kvgate minus kvgate-base (ms, MB). ``cpu_c32_paired`` is the same-round ratio, median
    (min-max) over rounds. ``ok``: the c=32 CPU ratio is at most :data:`BASELINE_CPU_RATIO`
    (None when either side has no figure).
    """
    after, before = record["targets"].get("kvgate", {}), record["targets"].get(BASELINE, {})
    mine, theirs = after.get("summary") or {}, before.get("summary") or {}

    def cpu(summary: Mapping[str, Any], phase: str, key: str = "cpu_us_per_request") -> float | None:
        return (summary.get(phase, {}).get(key) or {}).get("median")

    out: dict[str, Any] = {
        f"cpu_c{c}": _ratio(cpu(mine, f"c{c}"), cpu(theirs, f"c{c}")) for c in CONCURRENCIES
    }
    out["cpu_c32_paired"] = _spread(_paired_ratios(after.get("rounds", []), before.get("rounds", []), "c32"))
    out["requests_per_s_c32"] = _ratio(mine.get("c32", {}).get("requests_per_s"), theirs.get("c32", {}).get("requests_per_s"))
    out["added_p50_c1_diff_ms"] = _diff(mine.get("c1", {}).get("added_p50_ms"), theirs.get("c1", {}).get("added_p50_ms"))
    out["cpu_stream"] = _ratio(cpu(mine, "stream", "cpu_us_per_stream"), cpu(theirs, "stream", "cpu_us_per_stream"))
    out["ttfb_p50_diff_ms"] = _diff(mine.get("stream", {}).get("ttfb_p50_ms"), theirs.get("stream", {}).get("ttfb_p50_ms"))
    out["rss_after_load_diff_mb"] = _diff(mine.get("rss_mb_after_load"), theirs.get("rss_mb_after_load"))
    out["rss_streams_open_diff_mb"] = _diff(
        after.get("memory", {}).get("streams", {}).get("rss_open_mb"), before.get("memory", {}).get("streams", {}).get("rss_open_mb")
    )
    out["ok"] = None if out["cpu_c32"] is None else out["cpu_c32"] <= BASELINE_CPU_RATIO
    return out


def _signed(value: float | None, digits: int, unit: str) -> str:
    return "-" if value is None else f"{value:+,.{digits}f} {unit}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def compare_lines(comparison: Mapping[str, Any]) -> list[str]:
    """The printed form of :func:`compare`."""
    paired = comparison.get("cpu_c32_paired") or {}
    verdict = {True: "PASS", False: "FAIL", None: "n/a"}[comparison.get("ok")]
    pair = "-" if paired.get("median") is None else f"{paired['median']:.2f} ({paired['min']:.2f}-{paired['max']:.2f})"
    get = comparison.get
    cpu = (
        f"  {verdict} CPU us/req at c=32, kvgate / kvgate-base <= {BASELINE_CPU_RATIO:.2f}: {_x(get('cpu_c32'))}"
        f" (same-round ratio {pair}); c=1 {_x(get('cpu_c1'))}, c=128 {_x(get('cpu_c128'))}, per stream {_x(get('cpu_stream'))}"
    )
    rest = (
        f"  req/s c=32 x{_x(get('requests_per_s_c32'))}; +p50 c=1 {_signed(get('added_p50_c1_diff_ms'), 3, 'ms')};"
        f" TTFB p50 {_signed(get('ttfb_p50_diff_ms'), 3, 'ms')}; RSS after load {_signed(get('rss_after_load_diff_mb'), 1, 'MB')};"
        f" RSS streams open {_signed(get('rss_streams_open_diff_mb'), 1, 'MB')}  (kvgate minus kvgate-base)"
    )
    return [f"kvgate vs kvgate-base: CPU/req {_x(get('cpu_c32'))}", cpu, rest]


# ---- text -------------------------------------------------------------------------------------


def _f(value: float | None, digits: int = 2, width: int = 8) -> str:
    text = "-" if value is None else f"{value:,.{digits}f}"
    return " " + text.rjust(width - 1)  # a wide value pushes the row right instead of touching its neighbour


def _spread_text(spread: Mapping[str, float | None] | None, width: int = 20) -> str:
    if not spread or spread.get("median") is None:
        return " " + "-".rjust(width - 1)
    return " " + f"{spread['median']:,.0f} ({spread['min']:,.0f}-{spread['max']:,.0f})".rjust(width - 1)


def _unavailable(names: Sequence[str], record: Mapping[str, Any], width: int) -> list[str]:
    lines = []
    for name in names:
        target = record["targets"].get(name, {})
        if not target.get("available", False) and not target.get("rounds"):
            reason = (target.get("reason") or "not run").strip().splitlines()[0][:100]
            lines.append(f"{name:<{width}} unavailable: {reason}")
    return lines


def _state_of(name: str) -> tuple[str, int] | None:
    """(state, processes) of kvgate and its kvgate-redis/kvgate-mirror variants; None otherwise."""
    if name == "kvgate":
        return "memory", 1
    if not name.startswith(("kvgate-redis", "kvgate-mirror")):
        return None
    head, _, tail = name.rpartition("-")
    if tail.endswith("p") and tail[:-1].isdigit():
        return head.removeprefix("kvgate-"), int(tail[:-1])
    return name.removeprefix("kvgate-"), 1


def state_lines(record: Mapping[str, Any], width: int) -> list[str]:
    """kvgate's state backends side by side (CPU us/req at c=32 against ``kvgate``, memory; req/s
    of N processes against 1 of the same state), when the run has a state variant."""
    rows = {name: state for name in record["targets"] if (state := _state_of(name)) and record["targets"][name].get("summary")}
    if len(rows) < 2 or "kvgate" not in rows:
        return []
    def c32(name: str, field: str) -> float | None:
        value = record["targets"][name]["summary"].get("c32", {}).get(field)
        return value.get("median") if isinstance(value, Mapping) else value
    base = c32("kvgate", "cpu_us_per_request")
    lines = ["", "State backends (kvgate = memory; x memory = CPU us/req at c=32 over kvgate's; x 1 process = req/s over the same state's 1 process)",
             f"{'target':<{width}}{'state':>16}{'procs':>6}{'CPU us/req c=32':>17}{'x memory':>10}{'c=32 req/s':>12}{'x 1 process':>13}"]
    for name, (state, procs) in rows.items():
        cpu, rps = c32(name, "cpu_us_per_request"), c32(name, "requests_per_s")
        single = next((n for n, (st, p) in rows.items() if st == state and p == 1), None)
        one = c32(single, "requests_per_s") if single and procs > 1 else None
        lines.append(
            f"{name:<{width}}{state:>16}{procs:>6}{_f(cpu, 0, 17)}{_x(cpu / base if cpu and base else None):>10}"
            f"{_f(rps, 0, 12)}{_x(rps / one if rps and one else None):>13}"
        )
    return lines


def tables(record: Mapping[str, Any]) -> str:
    meta = record["meta"]
    names = list(record["targets"])
    summaries = {name: record["targets"][name].get("summary") for name in names}
    rows = [name for name in names if summaries.get(name)]
    w = max([len(name) for name in names] + [14]) + 1
    lines = [
        f"kvgate overhead: {meta['rounds']} round(s), {meta['seconds']} s per load, targets alternating; "
        f"gateway on core(s) {meta['gateway_cores']}, load generator ({meta['loadgen']}) + upstream on core(s) {meta['load_cores']}",
        "median over rounds; +p50 = p50 minus direct's p50 in the same round; CPU = the gateway's process tree, user+system",
        "",
        "Non-streaming chat completions (closed loop, keep-alive)",
        f"{'target':<{w}}{'c=1 p50':>9}{'+p50':>8} |{'c=32 req/s':>11}{'p50':>8}{'p99':>9}{'+p50':>8} |"
        f"{'c=128 req/s':>12}{'p50':>8}{'p99':>9}{'+p50':>8}  (ms)",
    ]
    for name in rows:
        s = summaries[name]
        c1, c32, c128 = s.get("c1", {}), s.get("c32", {}), s.get("c128", {})
        errors = sum(s.get(f"c{c}", {}).get("errors", 0) for c in CONCURRENCIES)
        lines.append(
            f"{name:<{w}}{_f(c1.get('p50_ms'), 2, 9)}{_f(c1.get('added_p50_ms'), 2)} |"
            f"{_f(c32.get('requests_per_s'), 0, 11)}{_f(c32.get('p50_ms'))}{_f(c32.get('p99_ms'), 2, 9)}{_f(c32.get('added_p50_ms'))} |"
            f"{_f(c128.get('requests_per_s'), 0, 12)}{_f(c128.get('p50_ms'))}{_f(c128.get('p99_ms'), 2, 9)}{_f(c128.get('added_p50_ms'))}"
            + (f"  ERRORS {errors}" if errors else "")
        )
    lines += _unavailable(names, record, w)
    lines += [
        "",
        "Cost of the gateway (CPU us per request: median (min-max) over rounds; RSS after the load rounds)",
        f"{'target':<{w}}{'CPU us/req c=1':>22}{'c=32':>22}{'c=128':>22}{'req/CPU-s':>11}{'req/s/core':>11}{'RSS MB':>8}{'idle CPU%':>10}",
    ]
    for name in rows:
        s = summaries[name]
        idle = record["targets"][name].get("idle", {})
        lines.append(
            f"{name:<{w}}{_spread_text(s.get('c1', {}).get('cpu_us_per_request'), 22)}"
            f"{_spread_text(s.get('c32', {}).get('cpu_us_per_request'), 22)}{_spread_text(s.get('c128', {}).get('cpu_us_per_request'), 22)}"
            f"{_f(s.get('requests_per_cpu_second'), 0, 11)}{_f(s.get('c128', {}).get('requests_per_s_per_gateway_core'), 0, 11)}"
            f"{_f(s.get('rss_mb_after_load'), 0)}{_f(idle.get('cpu_percent'), 1, 10)}"
        )
    lines += [
        "",
        "Streaming (SSE, one stream at a time; TTFB = request sent -> first body byte)",
        f"{'target':<{w}}{'TTFB p50':>10}{'+TTFB p50':>11}{'TTFB p99':>10}{'stream p50':>12}{'CPU us/stream':>26}  (ms)",
    ]
    for name in rows:
        st = summaries[name].get("stream")
        if not st:
            continue
        lines.append(
            f"{name:<{w}}{_f(st.get('ttfb_p50_ms'), 2, 10)}{_f(st.get('added_ttfb_p50_ms'), 2, 11)}{_f(st.get('ttfb_p99_ms'), 2, 10)}"
            f"{_f(st.get('total_p50_ms'), 2, 12)}{_spread_text(st.get('cpu_us_per_stream'), 26)}"
            + (f"  ERRORS {st['errors']}" if st.get("errors") else "")
        )
    memory_rows = [name for name in names if record["targets"][name].get("memory")]
    if memory_rows:
        lines += [
            "",
            "Memory (RSS of the gateway's process tree, MB)",
            f"{'target':<{w}}{'idle':>7}{'streams open':>14}{'RSS open':>10} |{'prompts':>9}{'prompts/s':>10}"
            f"{'RSS before':>11}{'after':>7}{'peak':>7}{'2nd half +':>11}",
        ]
        for name in memory_rows:
            memory = record["targets"][name]["memory"]
            st, pr = memory.get("streams", {}), memory.get("prompts", {})
            opened = f"{st.get('opened', 0)}/{st.get('requested', 0)}" if st else "-"
            lines.append(
                f"{name:<{w}}{_f(record['targets'][name].get('idle', {}).get('rss_mb'), 0, 7)}{opened:>14}{_f(st.get('rss_open_mb'), 0, 10)} |"
                f"{(str(pr.get('sent', '-'))):>9}{_f(pr.get('prompts_per_s'), 0, 10)}{_f(pr.get('rss_start_mb'), 0, 11)}"
                f"{_f(pr.get('rss_end_mb'), 0, 7)}{_f(pr.get('rss_peak_mb'), 0, 7)}{_f(pr.get('growth_second_half_mb'), 1, 11)}"
                + (f"  ({memory['error']})" if memory.get("error") else "")
            )
    lines += state_lines(record, w)
    if record.get("baseline"):
        base = meta.get("baseline_tree") or "?"
        lines += ["", f"kvgate ({meta.get('kvgate_commit') or '?'}) against kvgate-base ({base} at {meta.get('baseline_commit') or '?'})"]
        lines += compare_lines(record["baseline"])
    if record.get("budgets"):
        lines += ["", "kvgate against issue 7's budgets"]
        for check in record["budgets"]:
            verdict = {True: "PASS", False: "FAIL", None: "n/a"}[check["ok"]]
            measured = "-" if check["measured"] is None else f"{check['measured']:,.2f} {check['unit']}"
            lines.append(f"  {verdict:<5}{check['check']:<62}{check['budget']:>16}{measured:>14}")
    return "\n".join(lines)
