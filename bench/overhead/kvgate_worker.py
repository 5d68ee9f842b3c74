"""[io] One kvgate worker process on a shared port, for ``--kvgate-workers N`` (N > 1).

``kvgate serve`` binds its port exclusively, so several workers cannot share it. This stand-in
does what ``kvgate serve`` does (load the TOML, configure logging, ``create_app``, uvicorn with
the same options) but listens on a socket opened with ``SO_REUSEPORT``: N such processes bind
the same address and the kernel spreads incoming connections over them. State that must agree
across workers (prefix index, cluster-wide in-flight counts, keys) goes through the shared
store the config names (``[state] backend = "redis"``).

Until kvgate grows ``kvgate serve --workers N`` (see docs/overhead.md), this is what the
overhead benchmark starts N times.

    python -m bench.overhead.kvgate_worker --config FILE
"""

from __future__ import annotations

import argparse
import asyncio
import socket

import uvicorn


def reuseport_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when the listening
    # socket's proto says TCP; with proto 0, Nagle + delayed ACKs hold each stream's first bytes ~40 ms
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", required=True)
    parser.add_argument(
        "--loop", choices=("asyncio", "uvloop"), default="asyncio",
        help="event loop (kvgate serve runs asyncio.run, the stdlib loop; uvloop shows what switching would give)",
    )
    args = parser.parse_args(argv)

    from gateway.app import create_app
    from gateway.observability.logging import configure_logging
    from gateway.settings import load_settings

    settings = load_settings(args.config)
    configure_logging(settings.logging.format, settings.server.log_level)
    config = uvicorn.Config(
        create_app(settings, config_path=args.config),
        log_level=settings.server.log_level,
        access_log=False,
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    sock = reuseport_socket(settings.server.host, settings.server.port)
    if args.loop == "uvloop":
        import uvloop

        uvloop.run(server.serve(sockets=[sock]))
    else:
        asyncio.run(server.serve(sockets=[sock]))  # uvicorn captures SIGTERM and shuts down gracefully
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
