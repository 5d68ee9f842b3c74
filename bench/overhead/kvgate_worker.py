"""[io] One kvgate process on a shared port on a chosen event loop, for ``--kvgate-loop asyncio|uvloop``.

``kvgate serve --processes N`` is what the benchmark runs by default; this stand-in does what one
of its children does (load the TOML, configure logging, ``create_app``, uvicorn with the same
options, a ``SO_REUSEPORT`` socket) but lets the event loop be chosen, to measure what the loop
alone changes. State that must agree across processes goes through the shared store the config
names (``[state] backend = "redis"``).

    python -m bench.overhead.kvgate_worker --config FILE

With ``KVGATE_BENCH_CPROFILE=PATH`` the server runs under ``cProfile`` and writes its stats to
PATH when it stops (``bench.overhead --profile --profile-cprofile``).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import signal
import sys

import uvicorn

from gateway.process_pool import reuseport_socket


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument(
        "--loop", choices=("asyncio", "uvloop"), default="asyncio",
        help="event loop (kvgate serve runs asyncio.run, the stdlib loop; uvloop shows what switching would give)",
    )
    args = parser.parse_args(argv)

    from gateway.api.server import uvicorn_config
    from gateway.app import create_app
    try:
        from gateway.api.serving import tune_gc
    except ImportError:  # a --baseline-tree from before gateway/api/serving.py
        from gateway.cli import tune_gc  # type: ignore[attr-defined,no-redef]
    from gateway.observability.logging import configure_logging
    from gateway.config import load_settings

    settings = load_settings(args.config)
    configure_logging(settings.logging.format, settings.server.log_level)
    config = uvicorn_config(  # kvgate's own protocol (gateway/api/server.py), as `kvgate serve`
        create_app(settings, config_path=args.config),
        log_level=settings.server.log_level,
        access_log=False,
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    class Server(uvicorn.Server):
        async def startup(self, sockets: list | None = None) -> None:  # type: ignore[type-arg]
            await super().startup(sockets=sockets)
            tune_gc()  # as `kvgate serve`

    server = Server(config)
    sock = reuseport_socket(settings.server.host, settings.server.port)
    stats_path = os.environ.get("KVGATE_BENCH_CPROFILE")
    profiler = cProfile.Profile() if stats_path else None
    if profiler is not None:  # uvicorn re-raises SIGTERM after its shutdown: exit through `finally`
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        profiler.enable()
    try:
        if args.loop == "uvloop":
            import uvloop

            uvloop.run(server.serve(sockets=[sock]))
        else:
            asyncio.run(server.serve(sockets=[sock]))  # uvicorn captures SIGTERM and shuts down gracefully
    finally:
        if profiler is not None and stats_path:
            profiler.disable()
            profiler.dump_stats(stats_path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
