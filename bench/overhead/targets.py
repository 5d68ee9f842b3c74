"""[io] The targets of an overhead run: how each is configured, started, addressed and measured.

Every gateway forwards one model (``bench-model``) to the same fake upstream, binds 127.0.0.1
only, runs pinned to the gateway cores, and is ready once a real chat request through it
answers 200. ``direct`` is the upstream itself (no extra process): the baseline every "added"
figure subtracts.

    direct          the fake upstream, measured as if it were a gateway
    kvgate          ``kvgate serve --config FILE``: the default routing profile (``prefix-aware``:
                    prefix hashing, scheduling, the /metrics scraper), client auth with one key,
                    Prometheus metrics on; N > 1 workers: ``kvgate serve --processes N``
                    on one SO_REUSEPORT port with a Redis state store
    kvgate-redis, kvgate-mirror (and ``-hiredis``, ``-Np`` suffixes, e.g. ``kvgate-mirror-2p``)
                    the same kvgate with ``[state] backend = "redis"`` (``mode = "direct"`` /
                    ``"mirror"``) on the benchmark's Redis, N processes (``--processes N``), redis-py
                    with the hiredis parser from ``--hiredis-path``: the state backends side by
                    side with ``kvgate`` (memory) in one run
    kvgate-base     (``--baseline-tree PATH`` only) the same, started the same way with the same
                    config file, but importing the ``gateway`` package of PATH: "before" beside
                    "after" in one run
    floor           kvgate's HTTP stack with no gateway logic (``bench/overhead/floor_proxy.py``):
                    what kvgate costs above it is its own Python logic
    litellm         LiteLLM proxy, one worker, master key, local cost map (offline)
    vllm-router     vLLM's Rust router, default policy (cache_aware), Prometheus on a free port
    sglang-router   SGLang's Rust router, default policy (cache_aware), Prometheus on a free port
    portkey         the Portkey gateway on Node.js, headless; provider and upstream in headers
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.overhead import peers
from bench.overhead.load import wait_ready
from bench.overhead.proctree import Proc, free_port, spawn, stop
from bench.overhead.upstream import MODEL

ALL_TARGETS = ("direct", "kvgate", "floor", "litellm", "vllm-router", "sglang-router", "portkey")
_STATE_TARGET = re.compile(r"kvgate-(redis|mirror)(-hiredis)?(?:-([1-9])p)?")
BASELINE = "kvgate-base"  # a target only with --baseline-tree PATH, placed right after kvgate
CLIENT_KEY = "sk-bench-overhead-0123456789"
READY_TIMEOUT_S = {"litellm": 240.0, "portkey": 90.0}
REPO = Path(__file__).resolve().parents[2]

# Node.js binds every interface by default: force loopback before Portkey's code runs.
_NODE_LOOPBACK = """\
const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (args[0] !== null && typeof args[0] === 'object') {
    args[0] = { ...args[0], host: '127.0.0.1' };
  } else if (typeof args[0] === 'number' || (typeof args[0] === 'string' && /^\\d+$/.test(args[0]))) {
    if (typeof args[1] === 'string') args[1] = '127.0.0.1'; else args.splice(1, 0, '127.0.0.1');
  }
  return listen.apply(this, args);
};
"""


class Unavailable(Exception):
    """The target could not be installed or started; the message says why."""


@dataclass
class Context:
    """What every target's start-up needs."""

    upstream: str  # origin of the fake upstream, http://127.0.0.1:PORT
    upstream_pid: int
    work: Path  # configs for this run
    logs: Path
    cores: list[int]  # the gateway cores
    kvgate_workers: int = 1
    kvgate_loop: str = "serve"  # serve: `kvgate serve`; asyncio | uvloop: the worker launcher with that loop
    redis_url: str | None = None
    log: Callable[[str], None] = print
    baseline_tree: Path | None = None  # the tree kvgate-base imports ``gateway`` from
    loop_lag: bool = False  # kvgate runs a loop-lag monitor (bench/overhead/long_prompts.py reads /metrics)
    upstreams: list[str] = field(default_factory=list)  # every endpoint's origin (--endpoints N); empty: [upstream]
    state_redis_url: str | None = None  # the Redis of the kvgate-redis/kvgate-mirror targets
    hiredis_path: Path | None = None  # a folder holding the hiredis package (the -hiredis targets)
    load_cores: list[int] = field(default_factory=list)  # borrowed by a -Np target when the gateway cores are fewer than N

    @property
    def origins(self) -> list[str]:
        return self.upstreams or [self.upstream]


@dataclass(frozen=True)
class StateVariant:
    """A ``kvgate-redis``/``kvgate-mirror`` target: state mode, processes, hiredis or not."""

    mode: str  # direct | mirror
    processes: int
    hiredis: bool


def state_variant(name: str) -> StateVariant | None:
    """The variant a target name asks for (None: not one of them)."""
    found = _STATE_TARGET.fullmatch(name)
    if found is None:
        return None
    mode = "direct" if found.group(1) == "redis" else "mirror"
    return StateVariant(mode, int(found.group(3) or 1), bool(found.group(2)))


@dataclass
class Target:
    """A started target: where to send requests, with which headers, and which pids it is."""

    name: str
    url: str  # the chat completions URL
    headers: dict[str, str]
    roots: list[int]  # process trees whose CPU and RSS count
    procs: list[Proc] = field(default_factory=list)  # what to stop at the end (empty for direct)
    version: str = ""
    notes: str = ""

    def stop(self) -> None:
        stop(self.procs)


def _clean_env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("KVGATE__")}
    env.update({"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
    env.update(extra)
    return env


def _ready(target: Target, timeout_s: float) -> Target:
    alive = (lambda: all(proc.alive() for proc in target.procs)) if target.procs else (lambda: True)
    problem = wait_ready(target.url, target.headers, timeout_s, alive)
    if problem is not None:
        tails = "\n".join(f"--- {proc.log}\n{proc.log_tail()}" for proc in target.procs)
        target.stop()
        raise Unavailable(f"{problem}\n{tails}" if tails else problem)
    return target


def _installed(name: str, ctx: Context) -> peers.Installed:
    installed = peers.ensure(name, log=ctx.log)
    if not installed.ok:
        raise Unavailable(installed.error or "install failed")
    return installed


# ---- each target ------------------------------------------------------------------------------


def start_direct(ctx: Context) -> Target:
    return Target("direct", f"{ctx.upstream}/v1/chat/completions", {}, [ctx.upstream_pid], version="bench.overhead.upstream")


def kvgate_config(ctx: Context) -> str:
    """The one config file of ``kvgate`` and ``kvgate-base``; each gets its port (and, with Redis,
    its own state key prefix) from ``KVGATE__`` variables (:func:`_kvgate_env`)."""
    state = ""
    if ctx.redis_url:
        state = f'\n[state]\nbackend = "redis"\nredis_url = "{ctx.redis_url}"\n'
    endpoints = "".join(f'[[clusters.bench.endpoints]]\nurl = "{origin}/v1"\nmodel = "{MODEL}"\n\n' for origin in ctx.origins)
    return f"""\
# written by bench/overhead: kvgate's defaults plus one key, one cluster, one model
# (server.port and state.key_prefix come from KVGATE__SERVER__PORT / KVGATE__STATE__KEY_PREFIX)
[server]
host = "127.0.0.1"
log_level = "warning"

[auth]
api_keys = ["{CLIENT_KEY}"]

[metrics]
enabled = true

[clusters.bench]
description = "the overhead benchmark's fake upstream"

{endpoints}
[models.{MODEL}]
cluster = "bench"
{state}"""


# Written to the run's work folder and run by the target's interpreter: says which ``gateway`` it
# imported, then is ``kvgate`` (what the console script does) or ``python -m MODULE`` (the
# --kvgate-loop worker). A file outside both trees, so sys.path[0] holds no code of either.
_LAUNCHER = """\
\"\"\"bench.overhead: kvgate's launcher; argv: MODULE ARGS... (gateway.cli: `kvgate ARGS...`).\"\"\"
import os, sys, gateway
print(f"{MARK} {gateway.__file__} {getattr(gateway, '__version__', '?')}", file=sys.stderr, flush=True)
if os.environ.get("KVGATE_BENCH_LOOP_LAG"):  # a loop-lag monitor on the app's instruments, unless the app runs one
    try:
        import uvicorn
        from gateway.observability.loop_lag import LoopLagMonitor
    except ImportError:
        pass
    else:
        _startup, _MONITORS = uvicorn.Server.startup, []
        async def _with_monitor(self, sockets=None):
            await _startup(self, sockets=sockets)
            container = getattr(getattr(self.config.app, "state", None), "container", None)
            metrics = getattr(container, "metrics", None)
            own = getattr(container, "loop_lag", None)
            if own is not None:  # the app's monitor ([metrics] loop_lag_interval_s), at the bench's finer tick
                await own.stop()
                own.interval_s = float(os.environ["KVGATE_BENCH_LOOP_LAG"])
                own.start()
            elif metrics is not None and hasattr(metrics, "loop_lag"):
                monitor = LoopLagMonitor(float(os.environ["KVGATE_BENCH_LOOP_LAG"]), histogram=metrics.loop_lag,
                                         max_gauge=metrics.loop_lag_max, p99_gauge=metrics.loop_lag_p99, publish_every=20)
                _MONITORS.append(monitor)
                monitor.start()
        uvicorn.Server.startup = _with_monitor
module = sys.argv.pop(1)
if module == "gateway.cli":
    from gateway.cli import main
    sys.argv[0] = "kvgate"
    sys.exit(main())
import runpy
sys.argv[0] = module
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""
_MARK = "[bench.overhead] gateway imported from"


def _kvgate_files(ctx: Context) -> tuple[Path, Path]:
    """(the config file, the launcher), written once per run into its work folder."""
    config, launcher = ctx.work / "kvgate.toml", ctx.work / "kvgate_launch.py"
    if not config.exists():
        config.write_text(kvgate_config(ctx))
        launcher.write_text(_LAUNCHER.replace("{MARK}", _MARK))
    return config, launcher


def _kvgate_env(ctx: Context, code: Path, port: int, variant: StateVariant | None = None) -> dict[str, str]:
    env = _clean_env(KVGATE__SERVER__PORT=str(port))
    if ctx.redis_url or variant is not None:
        env["KVGATE__STATE__KEY_PREFIX"] = f"kvgate-bench-{port}:"
    extra = ""
    if variant is not None:
        if not ctx.state_redis_url:
            raise Unavailable("no Redis for the state targets (--redis-url, default redis://127.0.0.1:6379/15)")
        env.update(KVGATE__STATE__BACKEND="redis", KVGATE__STATE__REDIS_URL=ctx.state_redis_url,
                   KVGATE__STATE__MODE=variant.mode)
        if variant.hiredis:
            if ctx.hiredis_path is None or not (ctx.hiredis_path / "hiredis").is_dir():
                raise Unavailable("a -hiredis target needs --hiredis-path DIR holding the hiredis package")
            extra = str(ctx.hiredis_path)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(code), extra, env.get("PYTHONPATH", "")]))
    if ctx.loop_lag:
        env["KVGATE_BENCH_LOOP_LAG"] = "0.002"  # the ticker's interval, seconds
    if code != REPO:  # keep the baseline tree as it is: its bytecode goes to this run's work folder
        env["PYTHONPYCACHEPREFIX"] = str(ctx.work / "pycache-base")
    return env


def _imported_gateway(procs: list[Proc], code: Path) -> tuple[str, str]:
    """(``gateway.__file__``, version) as the first process logged them; raises
    :class:`Unavailable` when that package is not ``code``'s."""
    lines = [line for line in procs[0].log.read_text(errors="replace").splitlines() if line.startswith(_MARK)]
    if not lines:
        raise Unavailable(f"{procs[0].name} did not say which gateway package it imported")
    path, _, version = lines[-1].removeprefix(_MARK).strip().rpartition(" ")
    if not Path(path).resolve().is_relative_to((code / "gateway").resolve()):
        raise Unavailable(f"{procs[0].name} imported gateway from {path}, not from {code}")
    return path, version


def _start_kvgate_tree(ctx: Context, name: str, code: Path, variant: StateVariant | None = None) -> Target:
    """kvgate (``name``) running the code of the tree ``code``: PYTHONPATH and cwd are ``code``;
    ``variant``: the state backend and process count of a kvgate-redis/kvgate-mirror target."""
    port = free_port()
    config, launcher = _kvgate_files(ctx)
    env = _kvgate_env(ctx, code, port, variant)
    launch = [sys.executable, str(launcher)]
    procs: list[Proc] = []
    workers = ctx.kvgate_workers if variant is None else variant.processes
    cores = ctx.cores
    if variant is not None and len(cores) < workers:  # one core per process, shared with the load where it must
        cores = [*cores, *(c for c in ctx.load_cores if c not in cores)][:workers]
    redis = ctx.redis_url is not None or variant is not None
    state = "memory" if not redis else "redis" if variant is None else f"redis {variant.mode}{' hiredis' if variant.hiredis else ''}"
    if ctx.kvgate_loop == "serve":
        argv = [*launch, "gateway.cli", "serve", "--config", str(config)]
        notes = f"kvgate serve, state {state}"
        if workers > 1:
            if not redis:
                raise Unavailable("kvgate serve --processes N > 1 needs Redis for its shared state (--redis-url)")
            argv += ["--processes", str(workers)]
            notes = f"kvgate serve --processes {workers} (SO_REUSEPORT, state {state})"
        procs.append(spawn(name, argv, cores=cores, log_dir=ctx.logs, env=env, cwd=code))
    else:
        loop = ctx.kvgate_loop
        argv = [*launch, "bench.overhead.kvgate_worker", "--config", str(config), "--loop", loop]
        for index in range(workers):
            procs.append(spawn(f"{name}-{index}", argv, cores=cores, log_dir=ctx.logs, env=env, cwd=code))
        notes = f"{workers} x kvgate_worker (SO_REUSEPORT, {loop} loop, state {state})"
    target = Target(
        name, f"http://127.0.0.1:{port}/v1/chat/completions", {"Authorization": f"Bearer {CLIENT_KEY}"},
        [proc.pid for proc in procs], procs, notes=notes,
    )
    _ready(target, 60.0)
    try:
        path, target.version = _imported_gateway(procs, code)
    except Unavailable:
        target.stop()
        raise
    target.notes = f"{notes}; cores {','.join(map(str, cores))}; gateway from {path}"
    ctx.log(f"{name}: gateway imported from {path} (version {target.version})")
    return target


def start_kvgate(ctx: Context) -> Target:
    """kvgate with the code of this repository (the tree ``bench/overhead`` is in)."""
    return _start_kvgate_tree(ctx, "kvgate", REPO)


def start_kvgate_base(ctx: Context) -> Target:
    """kvgate with the code of ``--baseline-tree PATH``, otherwise exactly as :func:`start_kvgate`."""
    if ctx.baseline_tree is None:
        raise Unavailable("kvgate-base needs --baseline-tree PATH")
    tree = ctx.baseline_tree.resolve()
    if not (tree / "gateway" / "__init__.py").is_file():
        raise Unavailable(f"--baseline-tree {tree}: no gateway/__init__.py there")
    return _start_kvgate_tree(ctx, BASELINE, tree)


def start_floor(ctx: Context) -> Target:
    """kvgate's HTTP stack with no gateway logic (``bench/overhead/floor_proxy.py``)."""
    port = free_port()
    repo = REPO
    env = _clean_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH", "")]))
    argv = [sys.executable, "-m", "bench.overhead.floor_proxy", "--port", str(port), "--upstream", f"{ctx.upstream}/v1/chat/completions"]
    proc = spawn("floor", argv, cores=ctx.cores, log_dir=ctx.logs, env=env, cwd=repo)
    target = Target(
        "floor", f"http://127.0.0.1:{port}/v1/chat/completions", {}, [proc.pid], [proc],
        version="bench.overhead.floor_proxy", notes="uvicorn httptools protocol + native client, no gateway logic",
    )
    return _ready(target, 30.0)


def start_litellm(ctx: Context) -> Target:
    installed = _installed("litellm", ctx)
    port = free_port()
    config = ctx.work / "litellm.yaml"
    config.write_text(
        f"""\
model_list:
  - model_name: {MODEL}
    litellm_params:
      model: openai/{MODEL}
      api_base: {ctx.upstream}/v1
      api_key: sk-upstream-unused
general_settings:
  master_key: {CLIENT_KEY}
litellm_settings:
  telemetry: false
"""
    )
    env = _clean_env(LITELLM_LOCAL_MODEL_COST_MAP="True", LITELLM_LOG="ERROR", LITELLM_TELEMETRY="False")
    argv = [str(installed.bin("litellm")), "--config", str(config), "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"]
    proc = spawn("litellm", argv, cores=ctx.cores, log_dir=ctx.logs, env=env, cwd=ctx.work)
    target = Target(
        "litellm", f"http://127.0.0.1:{port}/v1/chat/completions", {"Authorization": f"Bearer {CLIENT_KEY}"},
        [proc.pid], [proc], version=peers.version_of(installed), notes="litellm --num_workers 1",
    )
    return _ready(target, READY_TIMEOUT_S["litellm"])


def _start_rust_router(ctx: Context, name: str, argv_head: list[str]) -> Target:
    installed = _installed(name, ctx)
    port, prometheus = free_port(), free_port()
    argv = [
        *(str(installed.bin(argv_head[0])), *argv_head[1:]),
        "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *ctx.origins,
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prometheus), "--log-level", "warning" if name == "vllm-router" else "warn",
    ]
    proc = spawn(name, argv, cores=ctx.cores, log_dir=ctx.logs, env=_clean_env(RUST_LOG="warn"), cwd=ctx.work)
    target = Target(
        name, f"http://127.0.0.1:{port}/v1/chat/completions", {}, [proc.pid], [proc],
        version=peers.version_of(installed), notes="default policy (cache_aware)",
    )
    return _ready(target, READY_TIMEOUT_S.get(name, 90.0))


def start_vllm_router(ctx: Context) -> Target:
    return _start_rust_router(ctx, "vllm-router", ["vllm-router"])


def start_sglang_router(ctx: Context) -> Target:
    return _start_rust_router(ctx, "sglang-router", ["python", "-m", "sglang_router.launch_router"])


def start_portkey(ctx: Context) -> Target:
    installed = _installed("portkey", ctx)
    port = free_port()
    preload = ctx.work / "node-loopback.cjs"
    preload.write_text(_NODE_LOOPBACK)
    server = installed.root / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"
    argv = ["node", "--require", str(preload), str(server), f"--port={port}", "--headless"]
    proc = spawn("portkey", argv, cores=ctx.cores, log_dir=ctx.logs, env=_clean_env(NODE_ENV="production"), cwd=installed.root)
    headers = {
        "Authorization": "Bearer sk-upstream-unused",
        "x-portkey-provider": "openai",
        "x-portkey-custom-host": f"{ctx.upstream}/v1",
    }
    target = Target(
        "portkey", f"http://127.0.0.1:{port}/v1/chat/completions", headers, [proc.pid], [proc],
        version=peers.version_of(installed), notes="node, --headless, @hono/node-server 1.13.8",
    )
    return _ready(target, READY_TIMEOUT_S["portkey"])


STARTERS: dict[str, Callable[[Context], Target]] = {
    "direct": start_direct,
    "kvgate": start_kvgate,
    BASELINE: start_kvgate_base,
    "floor": start_floor,
    "litellm": start_litellm,
    "vllm-router": start_vllm_router,
    "sglang-router": start_sglang_router,
    "portkey": start_portkey,
}


def known(name: str) -> bool:
    """Whether ``name`` is a target (:data:`STARTERS` or a state variant)."""
    return name in STARTERS or state_variant(name) is not None


def start(name: str, ctx: Context) -> Target:
    """Start ``name``; raises :class:`Unavailable` with the reason when it cannot."""
    try:
        variant = state_variant(name)
        if variant is not None:
            return _start_kvgate_tree(ctx, name, REPO, variant)
        return STARTERS[name](ctx)
    except Unavailable:
        raise
    except Exception as error:  # noqa: BLE001 - any failure of a peer becomes its row's reason
        raise Unavailable(f"{type(error).__name__}: {error}") from error
