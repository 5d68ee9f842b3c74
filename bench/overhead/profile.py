"""[io] kvgate under py-spy during non-streaming load, and the top functions by own time.

    .venv/bin/python -m bench.overhead --profile [--profile-seconds 15] [--profile-concurrency 32]
        [--profile-format raw|speedscope|flamegraph] [--profile-native] [--profile-stream] [--kvgate-workers N]
        [--endpoints N] [--profile-prompt-bytes N] [--profile-cprofile]

Starts the fake upstream and kvgate exactly as the benchmark does (default routing profile, auth,
metrics), warms it up, then samples the (first) kvgate process with ``py-spy record`` (installed
lazily beside the peers) while wrk drives ``--profile-concurrency`` connections (non-streaming
chat, or 18-event SSE streams with ``--profile-stream``; wrk reads chunked bodies to the end). Writes
``bench/out/kvgate-profile.<txt|speedscope.json|svg>`` and, for raw and speedscope, prints and
writes ``bench/out/kvgate-profile-top.txt``: functions by *own* time (the frame on top of the
stack when sampled) and by *inclusive* time (anywhere on the stack). py-spy drops idle samples
(the event loop waiting in epoll) by default, so shares are of the time kvgate was on the CPU.

``--profile-cprofile`` runs kvgate under ``cProfile`` instead (the ``bench.overhead.kvgate_worker``
launcher on uvloop, as ``kvgate serve`` runs it): the stats are written when kvgate stops (start-up
and warm-up included; per-request figures divide by every request served), and the top functions printed in microseconds per request, own (``tottime``)
and cumulative, to ``bench/out/kvgate-cprofile-top.txt``. cProfile's own cost inflates every
figure (calls most): read them as shares and call counts.

Raw output is Brendan Gregg's collapsed-stack format: speedscope.app and flamegraph.pl read it.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from bench.overhead import load, peers, targets
from bench.overhead.proctree import CpuWindow, stop

_LINE = re.compile(r":\d+\)$")


def _function(frame: str) -> str:
    """``handle (gateway/proxy.py:120)`` -> ``handle (gateway/proxy.py)``; shortens site-packages paths."""
    frame = _LINE.sub(")", frame.strip())
    return re.sub(r"\(\S*?site-packages/", "(", frame)


def _package(name: str) -> str:
    """``handle (gateway/proxy.py)`` -> ``gateway``; ``select (selectors.py)`` -> ``selectors``."""
    match = re.search(r"\((.*)\)$", name)
    path = match.group(1) if match else name
    first = path.lstrip("/").split("/", 1)[0]
    return first[:-3] if first.endswith(".py") else first


def _rank(stacks: Iterable[tuple[list[str], int]]) -> tuple[int, collections.Counter[str], collections.Counter[str]]:
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for frames, count in stacks:
        if not frames:
            continue
        total += count
        names = [_function(frame) for frame in frames]
        own[names[-1]] += count
        for name in set(names):
            inclusive[name] += count
    return total, own, inclusive


def stacks_from_raw(text: str) -> list[tuple[list[str], int]]:
    out = []
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            out.append((stack.split(";"), int(count)))
    return out


def stacks_from_speedscope(data: dict) -> list[tuple[list[str], int]]:  # type: ignore[type-arg]
    frames = data["shared"]["frames"]
    names = [f"{frame['name']} ({frame.get('file', '?')}:{frame.get('line', 0)})" for frame in frames]
    out = []
    for profile in data["profiles"]:
        for sample, weight in zip(profile["samples"], profile["weights"]):
            out.append(([names[index] for index in sample], int(weight)))
    return out


def summary_text(stacks: list[tuple[list[str], int]], top: int, header: str) -> str:
    total, own, inclusive = _rank(stacks)
    if not total:
        return header + "\nno samples (was kvgate busy? is ptrace allowed?)"
    packages: collections.Counter[str] = collections.Counter()
    for name, count in own.items():
        packages[_package(name)] += count
    ours = collections.Counter({name: count for name, count in inclusive.items() if "(gateway/" in name})
    lines = [header, f"{total} samples on CPU", "", f"top {top} by own time", f"{'own %':>7}  function (file)"]
    lines += [f"{count / total * 100:7.1f}  {name}" for name, count in own.most_common(top)]
    lines += ["", "own time by package (top-level module of the file)", f"{'own %':>7}  package"]
    lines += [f"{count / total * 100:7.1f}  {name}" for name, count in packages.most_common(top)]
    lines += ["", f"top {top} kvgate functions (gateway/) by inclusive time", f"{'incl %':>7}  function (file)"]
    lines += [f"{count / total * 100:7.1f}  {name}" for name, count in ours.most_common(top)]
    return "\n".join(lines)


def cprofile_text(path: Path, served: int, top: int, header: str) -> str:
    """The stats at ``path`` as two tables, us per request by own and by cumulative time."""
    import pstats

    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    rows = []
    for (file, line, name), (_, calls, own, cumulative, _) in stats.items():
        short = re.sub(r"^.*?(site-packages/|/gateway/|/asyncio/)", lambda m: "gateway/" if m.group(1) == "/gateway/" else m.group(1).strip("/") + "/" if m.group(1) == "/asyncio/" else "", file)
        rows.append((f"{name} ({short}:{line})", calls / served, own / served * 1e6, cumulative / served * 1e6))
    lines = [header, "", f"top {top} by own time", f"{'own us':>8} {'cum us':>8} {'calls':>6}  function"]
    lines += [f"{own:8.1f} {cum:8.1f} {calls:6.1f}  {name}" for name, calls, own, cum in sorted(rows, key=lambda r: -r[2])[:top]]
    ours = [row for row in rows if "gateway/" in row[0]]
    lines += ["", f"top {top} kvgate functions by cumulative time", f"{'cum us':>8} {'own us':>8} {'calls':>6}  function"]
    lines += [f"{cum:8.1f} {own:8.1f} {calls:6.1f}  {name}" for name, calls, own, cum in sorted(ours, key=lambda r: -r[3])[:top]]
    return "\n".join(lines)


def cprofile_main(args: argparse.Namespace) -> int:
    """``--profile-cprofile``: kvgate under cProfile during the same load; prints us/req tables."""
    from bench.overhead.run import OUT, log, raise_fd_limit, start_upstream  # run imports this module lazily

    os.sched_setaffinity(0, set(args.load))
    raise_fd_limit()
    logs = OUT / "overhead-logs"
    logs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kvgate-cprofile-"))
    stats_path = OUT / "kvgate-cprofile.pstats"
    stats_path.unlink(missing_ok=True)
    os.environ["KVGATE_BENCH_CPROFILE"] = str(stats_path)
    upstream, origins = start_upstream(args, logs)
    target = None
    served = 0
    try:
        ctx = targets.Context(
            upstream=origins[0], upstream_pid=upstream.pid, upstreams=origins, work=work, logs=logs, cores=args.gateway,
            kvgate_loop="uvloop", log=log,
        )
        target = targets.start("kvgate", ctx)
        body = load.chat_body(stream=args.profile_stream)
        for seconds in (2, args.profile_seconds):
            result = load.run_load(
                target.url, target.headers, concurrency=args.profile_concurrency, seconds=seconds, cores=args.load, loadgen="wrk",
                body=None if args.profile_prompt_bytes else body, unique_prompt_bytes=args.profile_prompt_bytes,
            )
            served += int(result["requests"] or 0)
    finally:
        os.environ.pop("KVGATE_BENCH_CPROFILE", None)
        if target is not None:
            target.stop()
        stop([upstream])
        shutil.rmtree(work, ignore_errors=True)
    for _ in range(50):
        if stats_path.exists():
            break
        time.sleep(0.1)
    header = (
        f"kvgate under cProfile, {'streaming' if args.profile_stream else 'non-streaming'} c={args.profile_concurrency}, "
        f"{args.endpoints} endpoint(s), prompts {args.profile_prompt_bytes or 'small'} B, {served} requests (warm-up included), {result['requests_per_s']:.0f} req/s under the profiler"
    )
    text = cprofile_text(stats_path, max(1, served), args.profile_top, header)
    (OUT / "kvgate-cprofile-top.txt").write_text(text + "\n")
    print(text)
    return 0


def main(args: argparse.Namespace) -> int:
    from bench.overhead.run import OUT, log, raise_fd_limit, redis_url_for, start_upstream  # run imports this module lazily

    if args.profile_cprofile:
        return cprofile_main(args)

    if not load.wrk_available():
        print("--profile needs wrk (apt-get install wrk)", file=sys.stderr)
        return 1
    spy = peers.ensure("py-spy", log=log)
    if not spy.ok:
        print(f"py-spy unavailable: {spy.error}", file=sys.stderr)
        return 1
    os.sched_setaffinity(0, set(args.load))
    raise_fd_limit()
    logs = OUT / "overhead-logs"
    logs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="kvgate-profile-"))
    suffix = {"raw": "txt", "speedscope": "speedscope.json", "flamegraph": "svg"}[args.profile_format]
    output = OUT / f"kvgate-profile.{suffix}"
    upstream, origins = start_upstream(args, logs)
    target = None
    try:
        ctx = targets.Context(
            upstream=origins[0], upstream_pid=upstream.pid, upstreams=origins, work=work, logs=logs, cores=args.gateway,
            kvgate_workers=args.kvgate_workers, kvgate_loop=args.kvgate_loop, redis_url=redis_url_for(args), log=log,
        )
        target = targets.start("kvgate", ctx)
        body = load.chat_body(stream=args.profile_stream)
        unique = args.profile_prompt_bytes
        load.run_load(
            target.url, target.headers, concurrency=args.profile_concurrency, seconds=2, cores=args.load, loadgen="wrk",
            body=None if unique else body, unique_prompt_bytes=unique,
        )
        argv = [
            "taskset", "-c", ",".join(map(str, args.load)), str(spy.bin("py-spy")), "record",
            "--pid", str(target.roots[0]), "--rate", "250", "--duration", str(args.profile_seconds),
            "--format", args.profile_format, "--output", str(output), *(["--native"] if args.profile_native else []),
        ]
        log(f"py-spy on pid {target.roots[0]} for {args.profile_seconds} s at c={args.profile_concurrency}: {output}")
        spy_proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(1.0)
        window = CpuWindow(target.roots)
        window.start()
        result = load.run_load(
            target.url, target.headers, concurrency=args.profile_concurrency, seconds=max(1, args.profile_seconds - 2),
            cores=args.load, loadgen="wrk", body=None if unique else body, unique_prompt_bytes=unique,
        )
        cpu = window.stop()
        spy_out, _ = spy_proc.communicate(timeout=args.profile_seconds + 60)
        if spy_proc.returncode != 0:
            print(f"py-spy failed ({spy_proc.returncode}):\n{spy_out[-2000:]}", file=sys.stderr)
            return 1
    finally:
        if target is not None:
            target.stop()
        stop([upstream])
        shutil.rmtree(work, ignore_errors=True)
    served = result["requests"] or 1
    header = (
        f"{args.endpoints} endpoint(s), kvgate under py-spy ({args.profile_format}{', native' if args.profile_native else ''}), "
        f"{'streaming' if args.profile_stream else 'non-streaming'} c={args.profile_concurrency}, "
        f"{result['requests_per_s']:.0f} req/s, CPU {cpu / served * 1e6:.0f} us/req while sampled (py-spy pauses the process: "
        f"higher than unprofiled), errors {result['errors']}"
    )
    if args.profile_format == "flamegraph":
        print(f"{header}\nflame graph: {output}")
        return 0
    if args.profile_format == "raw":
        stacks = stacks_from_raw(output.read_text())
    else:
        stacks = stacks_from_speedscope(json.loads(output.read_text()))
    text = summary_text(stacks, args.profile_top, header)
    (OUT / "kvgate-profile-top.txt").write_text(text + "\n")
    print(text)
    print(f"\nprofile: {output}   summary: {OUT / 'kvgate-profile-top.txt'}")
    return 0
