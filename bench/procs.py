"""Processes of a benchmark run: simulated workers, kvgate (or another router), readiness waits.

Every child starts in its own session (process group) and is stopped by signalling the group
(SIGTERM, then SIGKILL after a grace period), so nothing outlives the run. Output goes to log
files under the run's output directory. Optional CPU pinning (``taskset``) keeps the workers off
the router's core on small machines.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp


def free_port_block(count: int, start: int = 21000, stop: int = 60000) -> int:
    """First port of ``count`` consecutive free loopback ports."""
    port = start + (os.getpid() * 7) % 1000
    while port + count < stop:
        if all(_port_free(port + i) for i in range(count)):
            return port
        port += count + 1
    raise RuntimeError(f"no {count} consecutive free ports")


def _port_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class Child:
    """A started child process (its own process group) and its log file."""

    name: str
    process: subprocess.Popen[bytes]
    log: Path

    def stop(self, grace_s: float = 5.0) -> None:
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def start(name: str, argv: Sequence[str], log_dir: Path, cpus: str | None = None) -> Child:
    """Start ``argv`` in a new session, logging to ``log_dir/name.log``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    command = list(argv)
    if cpus is not None and shutil.which("taskset"):
        command = ["taskset", "-c", cpus, *command]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True, cwd=Path.cwd())
    return Child(name, process, log)


def sim_command(port: int, count: int, preset: str, model: str, seed: int,
                extra: Sequence[str] = ()) -> list[str]:
    """``python -m backends.sim`` for ``count`` workers from ``port``."""
    return [sys.executable, "-m", "backends.sim", "--port", str(port), "--count", str(count),
            "--preset", preset, "--model", model, "--seed", str(seed), *extra]


def kvgate_command(config: Path) -> list[str]:
    """``kvgate serve --config FILE`` with the console script next to this interpreter."""
    script = Path(sys.executable).parent / "kvgate"
    exe = str(script) if script.exists() else (shutil.which("kvgate") or "kvgate")
    return [exe, "serve", "--config", str(config)]


def kvgate_config(port: int, policy: str, model: str, worker_urls: Sequence[str]) -> str:
    """A kvgate TOML config: one cluster ``sim`` with one endpoint per worker."""
    lines = [
        "[server]", 'host = "127.0.0.1"', f"port = {port}", 'log_level = "warning"', "",
        "[health]", "interval_s = 1.0", "",
        "[routing]", f'policy = "{policy}"', "",
        "[clusters.sim]", 'description = "simulated vLLM workers (bench)"', "",
    ]
    for index, url in enumerate(worker_urls):
        lines += ["[[clusters.sim.endpoints]]", f'name = "sim-{index}"', f'url = "{url}/v1"',
                  f'model = "{model}"', ""]
    lines += [f"[models.{model}]", 'cluster = "sim"', "aliases = []", ""]
    return "\n".join(lines)


async def wait_ready(url: str, child: Child, timeout_s: float = 60.0,
                     accept: tuple[int, ...] = (200,)) -> None:
    """Poll ``url`` until it answers one of ``accept``; fail early if ``child`` exits."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    async with aiohttp.ClientSession() as session:
        while True:
            if child.process.poll() is not None:
                raise RuntimeError(f"{child.name} exited ({child.process.returncode}); see {child.log}")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as reply:
                    if reply.status in accept:
                        return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"{url} not ready after {timeout_s} s; see {child.log}")
            await asyncio.sleep(0.2)


async def wait_gateway_endpoints(origin: str, child: Child, count: int,
                                 timeout_s: float = 60.0) -> None:
    """Wait until kvgate's ``/ready`` reports ``count`` healthy endpoints."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    async with aiohttp.ClientSession() as session:
        while True:
            if child.process.poll() is not None:
                raise RuntimeError(f"{child.name} exited ({child.process.returncode}); see {child.log}")
            with contextlib.suppress(aiohttp.ClientError, OSError, ValueError):
                async with session.get(f"{origin}/ready") as reply:
                    body = await reply.json(content_type=None)
                    if reply.status == 200 and body.get("healthy_endpoints", count) >= count:
                        return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"kvgate at {origin} never saw {count} healthy endpoints")
            await asyncio.sleep(0.2)
