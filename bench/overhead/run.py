"""The overhead benchmark's driver: one command, every target, one table and one JSON record.

    .venv/bin/python -m bench.overhead [--quick] [--targets direct,kvgate,litellm,...] [--rounds 3]
        [--seconds 5] [--requests 200] [--kvgate-workers N] [--baseline-tree PATH] [--json PATH] [--profile]

1. Installs missing peers (cached under ``${KVGATE_HOME:-~/.cache/kvgate}/peers``), starts the
   fake upstream on the load cores, then every target on the gateway cores; a target that cannot
   be installed or started becomes a row "unavailable: reason" and the run goes on.
2. Rounds: each round visits every target (the order rotates by one each round), and for each:
   a short warm-up, non-streaming load at concurrency 1, 32 and 128, then ``--requests`` streams
   one at a time (time to first byte). CPU seconds of the target's process tree are read from
   /proc around each load; RSS after the round.
3. Memory (``--memory-targets``): ``--streams`` slow streams open at once (RSS while open), then
   distinct long prompts at concurrency 32 for ``--prompts-seconds`` (RSS curve).
4. ``--long-prompts``: unique prompts of 32 KB, 200 KB and 1 MB at concurrency 1, 32, 128 on
   every target, added latency against ``direct`` and kvgate's event-loop lag
   (``bench/overhead/long_prompts.py``).
5. Prints the tables (see docs/overhead.md) and writes the JSON record.

``--baseline-tree PATH`` (a checkout of kvgate, e.g. the commit before a refactor) adds the target
``kvgate-base`` right after ``kvgate``: the same launch and config file with PATH's ``gateway``
package, in every table, and a line "kvgate vs kvgate-base: CPU/req x.xx".
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if not __package__:  # run as a script: bench/overhead/run.py
    sys.path.insert(0, str(REPO))

from bench.overhead import load, long_prompts, report, targets  # noqa: E402
from bench.overhead.proctree import CpuWindow, Proc, free_port, parse_cores, rss_bytes, spawn, stop, tree  # noqa: E402

OUT = REPO / "bench" / "out"
MB = 1024 * 1024


def log(line: str) -> None:
    print(f"[overhead {time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.overhead", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--targets", default=",".join(targets.ALL_TARGETS), help="comma-separated, in this order")
    parser.add_argument("--rounds", type=int, help="rounds over all targets (default 3; --quick 2)")
    parser.add_argument("--seconds", type=int, help="seconds per non-streaming load (default 5; --quick 2)")
    parser.add_argument("--requests", type=int, help="streams per TTFB measurement (default 200; --quick 60)")
    parser.add_argument("--concurrency", default="1,32,128", help="non-streaming concurrencies (default 1,32,128)")
    parser.add_argument("--quick", action="store_true", help="short runs for development (noisy)")
    parser.add_argument("--json", type=Path, help="where to write the record (default bench/out/overhead.json)")
    parser.add_argument("--gateway-cores", default="0", help="cores every target is pinned to (default 0)")
    parser.add_argument("--load-cores", default="", help="cores of load generator + upstream (default: the others)")
    parser.add_argument("--loadgen", choices=("auto", "wrk", "aiohttp"), default="auto", help="auto: wrk if installed")
    parser.add_argument(
        "--endpoints", type=int, default=1,
        help="upstream endpoints (one fake-upstream process on N ports): every router's cluster has N endpoints",
    )
    parser.add_argument("--kvgate-workers", type=int, default=1, help="kvgate processes behind one port (kvgate serve --processes N; needs Redis)")
    parser.add_argument(
        "--kvgate-loop", choices=("serve", "asyncio", "uvloop"), default="serve",
        help="serve: `kvgate serve` (uvloop); asyncio|uvloop: bench.overhead.kvgate_worker with that loop",
    )
    parser.add_argument(
        "--baseline-tree", type=Path, metavar="PATH",
        help="a kvgate checkout (e.g. before a change): adds target kvgate-base, kvgate with that tree's code",
    )
    parser.add_argument("--redis-url", help="kvgate's state store with --kvgate-workers > 1 and of the kvgate-redis/"
                        "kvgate-mirror[-hiredis][-Np] targets (default: local Redis db 15 if up)")
    parser.add_argument("--hiredis-path", type=Path, help="a folder holding the hiredis package, for the -hiredis targets "
                        "(e.g. pip install --target DIR hiredis)")
    parser.add_argument("--memory-targets", help="targets of the memory checks (default: every gateway; 'none' skips)")
    parser.add_argument("--streams", type=int, help="slow streams open at once (default 1000; --quick 300)")
    parser.add_argument("--hold-s", type=int, help="how long the upstream holds each slow stream (default 15; --quick 6)")
    parser.add_argument("--prompts", type=int, help="distinct prompts at most (default 100000; --quick 5000)")
    parser.add_argument("--prompts-seconds", type=int, help="distinct-prompt phase time cap (default 60; --quick 10)")
    parser.add_argument("--prompt-bytes", type=int, default=8192, help="bytes per distinct prompt (default 8192)")
    parser.add_argument("--long-prompts", action="store_true", help="add the long-prompt phase (bench/overhead/long_prompts.py)")
    parser.add_argument("--long-sizes", default="32000,200000,1000000", help="prompt bytes of the long-prompt phase")
    parser.add_argument("--long-concurrency", default="1,32,128", help="concurrencies of the long-prompt phase")
    parser.add_argument("--long-seconds", type=int, help="seconds per long-prompt load (default 4; --quick 2)")
    parser.add_argument("--profile", action="store_true", help="profile kvgate under py-spy instead (bench/overhead/profile.py)")
    parser.add_argument("--profile-seconds", type=int, default=15)
    parser.add_argument("--profile-concurrency", type=int, default=32)
    parser.add_argument("--profile-stream", action="store_true", help="profile streaming requests instead")
    parser.add_argument("--profile-format", choices=("raw", "speedscope", "flamegraph"), default="raw")
    parser.add_argument("--profile-native", action="store_true", help="py-spy --native (C frames too)")
    parser.add_argument("--profile-top", type=int, default=15)
    parser.add_argument("--profile-cprofile", action="store_true", help="cProfile instead of py-spy (us/req per function)")
    parser.add_argument("--profile-prompt-bytes", type=int, default=0, help="unique prompts of N bytes (py-spy or --profile-cprofile)")
    args = parser.parse_args(argv)
    quick = args.quick
    defaults = {
        "rounds": 2 if quick else 3, "seconds": 2 if quick else 5, "requests": 60 if quick else 200,
        "streams": 300 if quick else 1000, "hold_s": 6 if quick else 15,
        "prompts": 5000 if quick else 100000, "prompts_seconds": 10 if quick else 60, "long_seconds": 2 if quick else 4,
    }
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    args.target_list = with_baseline([name.strip() for name in args.targets.split(",") if name.strip()], args.baseline_tree)
    known = (*targets.ALL_TARGETS, targets.BASELINE) if args.baseline_tree else targets.ALL_TARGETS
    unknown = [name for name in args.target_list if name not in known and targets.state_variant(name) is None]
    if unknown:
        parser.error(f"unknown targets {unknown}; known: {', '.join(known)}")
    if args.baseline_tree and not (args.baseline_tree / "gateway" / "__init__.py").is_file():
        parser.error(f"--baseline-tree {args.baseline_tree}: no gateway/__init__.py there")
    args.concurrencies = [int(c) for c in args.concurrency.split(",") if c]
    args.long_sizes = [int(size) for size in args.long_sizes.split(",") if size]
    args.long_concurrencies = [int(c) for c in args.long_concurrency.split(",") if c]
    args.gateway = parse_cores(args.gateway_cores)
    all_cores = sorted(os.sched_getaffinity(0))
    args.load = parse_cores(args.load_cores) if args.load_cores else [c for c in all_cores if c not in args.gateway] or all_cores
    if args.loadgen == "auto":
        args.loadgen = "wrk" if load.wrk_available() else "aiohttp"
    if args.memory_targets is None:
        args.memory_list = [name for name in args.target_list if name != "direct"]
    else:
        args.memory_list = [n for n in args.memory_targets.split(",") if n and n != "none"]
    return args


def with_baseline(names: list[str], baseline_tree: Path | None) -> list[str]:
    """``names`` with ``kvgate-base`` right after ``kvgate`` (or last) when a baseline tree is given."""
    if baseline_tree is None or targets.BASELINE in names:
        return names
    at = names.index("kvgate") + 1 if "kvgate" in names else len(names)
    return [*names[:at], targets.BASELINE, *names[at:]]


def git_commit(tree: Path) -> str | None:
    """The commit checked out at ``tree`` (with ``+dirty`` when tracked files changed), or None."""

    def git(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", "-C", str(tree), *argv], capture_output=True, text=True, timeout=10, check=False)

    try:
        head, dirty = git("rev-parse", "--short", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def redis_url_for(args: argparse.Namespace, *, state_targets: bool = False) -> str | None:
    """The Redis of kvgate's state (``state_targets``: of the kvgate-redis/kvgate-mirror targets),
    if it answers; None otherwise."""
    if not state_targets and args.kvgate_workers <= 1 and not args.redis_url:
        return None
    if state_targets and not any(targets.state_variant(name) for name in args.target_list):
        return None
    url = args.redis_url or "redis://127.0.0.1:6379/15"
    try:
        import redis

        redis.Redis.from_url(url, socket_timeout=1).ping()
    except Exception as error:  # noqa: BLE001
        log(f"no Redis at {url} ({error}); kvgate workers keep their state in memory, each its own")
        return None
    return url


def raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 65536)), hard))


def start_upstream(args: argparse.Namespace, logs: Path) -> tuple[Proc, list[str]]:
    """The fake upstream on ``args.endpoints`` ports: (its process, the origins, first = ``direct``)."""
    ports = [free_port() for _ in range(max(1, getattr(args, "endpoints", 1)))]
    argv = [sys.executable, "-m", "bench.overhead.upstream"]
    for port in ports:
        argv += ["--port", str(port)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = spawn("upstream", argv, cores=args.load, log_dir=logs, env=env, cwd=REPO)
    origins = [f"http://127.0.0.1:{port}" for port in ports]
    for origin in origins:
        problem = load.wait_ready(f"{origin}/v1/chat/completions", {}, 20, proc.alive)
        if problem:
            stop([proc])
            raise RuntimeError(f"the fake upstream did not start: {problem}\n{proc.log_tail()}")
    return proc, origins


# ---- measurements -----------------------------------------------------------------------------


def settle(target: targets.Target, timeout_s: float = 60.0) -> float:
    """Wait until the target is quiet (< 10% of a core over 0.25 s): a slow gateway may still be
    working off the backlog of the last closed-loop run, which would spill into the next window."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        window = CpuWindow(target.roots)
        window.start()
        time.sleep(0.25)
        if window.stop() < 0.025:
            break
    return time.monotonic() - started


def measured_load(target: targets.Target, args: argparse.Namespace, concurrency: int) -> dict[str, Any]:
    settle(target)
    window = CpuWindow(target.roots)
    window.start()
    result = load.run_load(
        target.url, target.headers, concurrency=concurrency, seconds=args.seconds, cores=args.load, loadgen=args.loadgen,
    )
    cpu = window.stop()
    served = result["requests"] or 0
    result["cpu_s"] = cpu
    result["cpu_s_stat"] = window.stat_seconds
    result["cpu_us_per_request"] = cpu / served * 1e6 if served else None
    return result


def measured_streams(target: targets.Target, args: argparse.Namespace) -> dict[str, Any]:
    settle(target)
    window = CpuWindow(target.roots)
    window.start()
    result = load.stream_ttfb(target.url, target.headers, count=args.requests, seconds=max(30, args.seconds * 6))
    cpu = window.stop()
    streams = result["streams"] or 0
    result["cpu_s"] = cpu
    result["cpu_s_stat"] = window.stat_seconds
    result["cpu_us_per_request"] = cpu / streams * 1e6 if streams else None
    return result


def idle_figures(target: targets.Target, seconds: float = 2.0) -> dict[str, float]:
    window = CpuWindow(target.roots)
    window.start()
    time.sleep(seconds)
    cpu = window.stop()
    return {"cpu_percent": cpu / seconds * 100, "rss_mb": rss_bytes(tree(target.roots)) / MB}


def one_round(target: targets.Target, args: argparse.Namespace, number: int) -> dict[str, Any]:
    record: dict[str, Any] = {"round": number}
    load.run_load(target.url, target.headers, concurrency=32, seconds=1, cores=args.load, loadgen=args.loadgen)  # warm-up
    for concurrency in args.concurrencies:
        record[f"c{concurrency}"] = result = measured_load(target, args, concurrency)
        log(
            f"round {number} {target.name:<14} c={concurrency:<4} {result['requests_per_s']:8.0f} req/s  "
            f"p50 {result['p50_ms'] or 0:7.2f} ms  CPU {result['cpu_us_per_request'] or 0:8.0f} us/req"
            + (f"  errors {result['errors']}" if result["errors"] else "")
        )
    record["stream"] = result = measured_streams(target, args)
    log(
        f"round {number} {target.name:<14} stream TTFB p50 {result['ttfb_p50_ms'] or 0:6.2f} ms  "
        f"CPU {result['cpu_us_per_request'] or 0:8.0f} us/stream" + (f"  errors {result['errors']}" if result["errors"] else "")
    )
    record["rss_mb"] = rss_bytes(tree(target.roots)) / MB
    return record


def memory_checks(target: targets.Target, args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    pids = lambda: tree(target.roots)  # noqa: E731
    # 1. many slow streams open at once
    settle(target)
    samples: list[float] = []
    before = rss_bytes(pids()) / MB
    streams = load.open_streams(
        target.url, target.headers, count=args.streams, hold_s=args.hold_s, open_timeout_s=max(30.0, args.streams / 20),
        on_tick=lambda: samples.append(rss_bytes(pids()) / MB),
    )
    streams.update({"rss_before_mb": before, "rss_open_mb": max(samples) if samples else None})
    out["streams"] = streams
    log(f"memory {target.name:<14} {streams['opened']}/{streams['requested']} streams open: RSS {before:.0f} -> {streams['rss_open_mb'] or 0:.0f} MB")
    # 2. distinct prompts: RSS curve
    settle(target)
    curve: list[tuple[float, float]] = []
    started = time.monotonic()
    tag = uuid.uuid4().hex[:10]
    rss_start = rss_bytes(pids()) / MB
    window = CpuWindow(target.roots)
    window.start()
    prompts = load.run_load(
        target.url, target.headers, concurrency=32, seconds=args.prompts_seconds, cores=args.load, loadgen=args.loadgen,
        unique_prompt_bytes=args.prompt_bytes, tag=tag, requests=args.prompts,
        on_tick=lambda: curve.append((time.monotonic() - started, rss_bytes(pids()) / MB)),
    )
    cpu = window.stop()
    rss_end = rss_bytes(pids()) / MB
    curve.append((time.monotonic() - started, rss_end))
    middle = curve[len(curve) // 2][1] if curve else rss_end
    sent = int(prompts["requests"] or 0)
    out["prompts"] = {
        "sent": sent,
        "errors": prompts["errors"],
        "prompt_bytes": args.prompt_bytes,
        "prompts_per_s": prompts["requests_per_s"],
        "cpu_us_per_request": cpu / sent * 1e6 if sent else None,
        "rss_start_mb": rss_start,
        "rss_end_mb": rss_end,
        "rss_peak_mb": max([rss_end, *(value for _, value in curve)]),
        "growth_first_half_mb": middle - rss_start,
        "growth_second_half_mb": rss_end - middle,
        "curve": [(round(t, 2), round(value, 1)) for t, value in curve],
    }
    log(f"memory {target.name:<14} {sent} distinct prompts: RSS {rss_start:.0f} -> {rss_end:.0f} MB (mid {middle:.0f})")
    return out


# ---- the run ----------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    os.sched_setaffinity(0, set(args.load))
    raise_fd_limit()
    logs = OUT / "overhead-logs"
    shutil.rmtree(logs, ignore_errors=True)
    logs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kvgate-overhead-"))
    started = time.time()
    record: dict[str, Any] = {
        "meta": {
            "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join(["python -m bench.overhead", *sys.argv[1:]]),
            "host": platform.node(), "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "rounds": args.rounds, "seconds": args.seconds, "streams_per_ttfb": args.requests,
            "concurrencies": args.concurrencies, "gateway_cores": args.gateway_cores or "0",
            "load_cores": ",".join(map(str, args.load)), "loadgen": args.loadgen,
            "kvgate_workers": args.kvgate_workers, "kvgate_loop": args.kvgate_loop, "endpoints": args.endpoints,
            "loadavg_start": os.getloadavg(),
            "kvgate_tree": str(REPO), "kvgate_commit": git_commit(REPO),
            "baseline_tree": str(args.baseline_tree.resolve()) if args.baseline_tree else None,
            "baseline_commit": git_commit(args.baseline_tree) if args.baseline_tree else None,
        },
        "targets": {name: {"available": False, "reason": "not started"} for name in args.target_list},
    }
    upstream, origins = start_upstream(args, logs)
    running: dict[str, targets.Target] = {}
    try:
        ctx = targets.Context(
            upstream=origins[0], upstream_pid=upstream.pid, work=work, logs=logs, cores=args.gateway,
            kvgate_workers=args.kvgate_workers, kvgate_loop=args.kvgate_loop, redis_url=redis_url_for(args), log=log,
            baseline_tree=args.baseline_tree, loop_lag=args.long_prompts, upstreams=origins,
            state_redis_url=redis_url_for(args, state_targets=True), hiredis_path=args.hiredis_path,
            load_cores=args.load,
        )
        record["meta"]["kvgate_state"] = "redis" if ctx.redis_url else "memory"
        for name in args.target_list:
            begun = time.monotonic()
            try:
                target = targets.start(name, ctx)
            except targets.Unavailable as error:
                log(f"{name}: unavailable: {error}")
                record["targets"][name] = {"available": False, "reason": str(error)}
                continue
            running[name] = target
            record["targets"][name] = {
                "available": True, "reason": None, "version": target.version, "notes": target.notes,
                "start_s": round(time.monotonic() - begun, 2), "rounds": [],
            }
            log(f"{name}: ready in {time.monotonic() - begun:.1f} s ({target.version} {target.notes})")
        for name, target in running.items():
            record["targets"][name]["idle"] = idle_figures(target)
        order = list(running)
        for number in range(args.rounds):
            shift = number % len(order) if order else 0
            for name in order[shift:] + order[:shift]:
                target = running[name]
                if target.procs and not all(proc.alive() for proc in target.procs):
                    record["targets"][name].update(available=False, reason=f"exited before round {number}")
                    continue
                try:
                    record["targets"][name]["rounds"].append(one_round(target, args, number))
                except Exception as error:  # noqa: BLE001 - a failing target must not stop the others
                    log(f"round {number} {name}: failed: {error}")
                    record["targets"][name].setdefault("failures", []).append(f"round {number}: {error}")
        if args.long_prompts:
            record["long_prompts"] = long_prompts.long_prompt_phase(running, args, log)
        for name in args.memory_list:
            target = running.get(name)
            if target is None or (target.procs and not all(proc.alive() for proc in target.procs)):
                continue
            try:
                record["targets"][name]["memory"] = memory_checks(target, args)
            except Exception as error:  # noqa: BLE001
                log(f"memory {name}: failed: {error}")
                record["targets"][name]["memory"] = {"error": str(error)}
    finally:
        for target in running.values():
            target.stop()
        stop([upstream])
        shutil.rmtree(work, ignore_errors=True)
    record["meta"]["elapsed_s"] = round(time.time() - started, 1)
    record["meta"]["loadavg_end"] = os.getloadavg()
    summaries = report.summarize(record, gateway_cores=len(args.gateway))
    for name, summary in summaries.items():
        record["targets"][name]["summary"] = summary
    if "kvgate" in record["targets"]:
        record["budgets"] = report.budgets(record)
    if targets.BASELINE in record["targets"]:
        record["baseline"] = report.compare(record)
    return record


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.profile:
        from bench.overhead import profile

        return profile.main(args)
    record = run(args)
    path = args.json or OUT / "overhead.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(report.tables(record))
    if "long_prompts" in record:
        print(long_prompts.table(record))
    print(f"\nJSON: {path}   logs: {OUT / 'overhead-logs'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
