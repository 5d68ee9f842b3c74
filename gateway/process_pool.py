"""N gateway processes behind one port: ``kvgate serve --processes N`` (``server.processes``).

One Python process serves about one core's worth of requests (the GIL), so a host with more cores
runs several gateway processes. Each child is a complete ``kvgate serve`` (``create_app`` after
its own start, so nothing is shared by fork) listening on its own socket bound with
``SO_REUSEPORT`` (Linux >= 3.9): every child binds the same address and the kernel hashes each
new TCP connection to one listener. Keep-alive connections stay with the child that accepted them.

State that must agree across the children goes through the shared store, so more than one process
requires ``[state] backend = "redis"`` (the prefix index, in-flight counts, client keys, quotas
and admin changes); with ``memory`` every child would keep its own index and enforce each limit N
times, so :func:`check_processes` refuses it with a :class:`~gateway.config.ConfigError`.

Prometheus: the parent points every child at one fresh ``PROMETHEUS_MULTIPROC_DIR``
(prometheus_client's multiprocess mode), so ``GET /metrics``, whichever child answers, reports
counters and histograms summed over all children (a restarted child's counts are kept), and gauges
combined as each instrument declares (``multiprocess_mode``). Scrape-time gauges (circuit state,
draining, weight) are the answering child's own view.

The parent serves nothing and holds no socket. It

* restarts a child that exits unasked, after the backoff of ``backends.workers.lifecycle.RestartPolicy``
  (the vLLM workers' policy; here 0.5 s doubling up to 30 s), and gives up (stops every child,
  exit status 1) when one child exits ``crash_loop_limit`` (5) times within ``crash_window_s``
  (60 s): a bad port, a config the child refuses;
* on SIGTERM or SIGINT sends SIGTERM to every child (each drains: uvicorn's graceful shutdown,
  30 s) and SIGKILLs what is left after ``stop_timeout_s``; exit status 0. A child drains on its
  first signal and ignores repeats (Ctrl-C reaches it from the terminal and again from the parent);
* refuses to start (:func:`check_shared_store`) when Redis does not answer.

A child asks the kernel to SIGTERM it when the parent dies (``PR_SET_PDEATHSIG``), so a SIGKILLed
parent leaves no gateway processes holding the port.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from yarl import URL

from backends.workers.lifecycle import RestartPolicy
from gateway.config import ConfigError, Settings

log = logging.getLogger("kvgate.processes")

# backoff 0.5 s doubling to 30 s; five unasked exits of one process within a minute stop the pool
RESTART_POLICY = RestartPolicy(backoff_initial_s=0.5, backoff_max_s=30.0, crash_loop_limit=5, crash_window_s=60.0)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
PARENT_PID_ENV = "KVGATE_POOL_PARENT_PID"


def check_processes(settings: Settings, processes: int) -> None:
    """Raise :class:`ConfigError` unless ``processes`` gateway processes can share state.

    ``processes`` < 1 is refused; > 1 needs ``state.backend = "redis"``.
    """
    if processes < 1:
        raise ConfigError(f"server.processes: must be at least 1, got {processes}")
    if processes > 1 and settings.state.backend != "redis":
        raise ConfigError(
            f"server.processes = {processes} needs state.backend = \"redis\" (with \"memory\" each process keeps "
            "its own prefix index, in-flight counts and quotas, so limits would be enforced once per process); "
            "set [state] backend = \"redis\" and redis_url, or run one process"
        )


def check_shared_store(settings: Settings, processes: int, timeout_s: float = 3.0) -> None:
    """Raise :class:`ConfigError` if ``processes`` > 1 and the Redis of ``state.redis_url`` does not answer.

    Once running, a process that loses Redis falls back to its local view (and says so); at start
    several processes without their shared store would begin split, so they are not started.
    """
    if processes <= 1 or settings.state.redis_url is None:
        return
    import redis

    client = redis.Redis.from_url(settings.state.redis_url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    try:
        client.ping()
    except (redis.RedisError, OSError) as error:
        raise ConfigError(
            f"state.redis_url: no answer from {_redacted(settings.state.redis_url)} ({str(error) or type(error).__name__}); "
            f"server.processes = {processes} needs the shared store at start"
        ) from None
    finally:
        client.close()


def _redacted(url: str) -> str:
    """``url`` with its password masked (``redis://:secret@host`` -> ``redis://:***@host``)."""
    parsed = URL(url)
    return str(parsed.with_password("***")) if parsed.password else url


def exit_with_parent() -> None:
    """In a child of the pool: ask Linux to SIGTERM this process when the parent dies (even by SIGKILL).

    ``prctl(PR_SET_PDEATHSIG, SIGTERM)``; a no-op where prctl is unavailable. If the parent is
    already gone (adopted by init), exit at once.
    """
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    expected = os.environ.get(PARENT_PID_ENV)
    if expected and os.getppid() != int(expected):  # the parent died before prctl took effect
        raise SystemExit(0)


def reuseport_socket(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """A listening TCP socket on ``host:port`` with ``SO_REUSEPORT``, for one of several processes.

    Created with ``IPPROTO_TCP``: asyncio sets ``TCP_NODELAY`` on accepted connections only when
    the listening socket's ``proto`` is TCP; with ``proto == 0`` Nagle plus delayed ACKs hold a
    stream's first bytes ~40 ms. Raises :class:`OSError` if the address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock


@dataclass
class _Child:
    index: int
    process: asyncio.subprocess.Process | None = None
    crashes: list[float] = field(default_factory=list)  # monotonic times of unasked exits in the window


class GatewayProcessPool:
    """Starts ``count`` children running ``argv`` and keeps them running until asked to stop.

    ``argv`` is the child's whole command line (``kvgate serve --config FILE --reuse-port``).
    :meth:`run` returns the exit status: 0 after a requested stop, 1 after a crash loop.
    """

    def __init__(self, argv: Sequence[str], count: int, *, policy: RestartPolicy = RESTART_POLICY,
                 stop_timeout_s: float = 40.0) -> None:
        self.argv, self.count, self.policy, self.stop_timeout_s = list(argv), count, policy, stop_timeout_s
        self.children = [_Child(index) for index in range(count)]
        self._stopping = asyncio.Event()
        self._multiproc_dir = ""

    def request_stop(self) -> None:
        self._stopping.set()

    async def run(self) -> int:
        self._multiproc_dir = tempfile.mkdtemp(prefix="kvgate-metrics-")
        try:
            return await self._run()
        finally:
            shutil.rmtree(self._multiproc_dir, ignore_errors=True)

    async def _run(self) -> int:
        for child in self.children:
            await self._spawn(child)
        log.info("kvgate: %d gateway processes started (pids %s)", self.count,
                 ", ".join(str(c.process.pid) for c in self.children if c.process))
        watchers = {asyncio.ensure_future(self._wait(child)): child for child in self.children}
        stop = asyncio.ensure_future(self._stopping.wait())
        status = 0
        try:
            while not self._stopping.is_set():
                done, _ = await asyncio.wait({stop, *watchers}, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    if task is stop:
                        continue
                    child = watchers.pop(task)
                    if self._stopping.is_set():
                        continue
                    if not await self._restart(child, task.result()):
                        status = 1
                        self._stopping.set()
                        break
                    watchers[asyncio.ensure_future(self._wait(child))] = child
        finally:
            stop.cancel()
            await self._stop_all()
            for task in watchers:
                task.cancel()
        return status

    async def _spawn(self, child: _Child) -> None:
        env = {**os.environ, MULTIPROC_ENV: self._multiproc_dir, PARENT_PID_ENV: str(os.getpid())}
        child.process = await asyncio.create_subprocess_exec(*self.argv, env=env)

    async def _wait(self, child: _Child) -> int:
        assert child.process is not None
        return await child.process.wait()

    async def _restart(self, child: _Child, code: int) -> bool:
        """Restart ``child`` after its unasked exit; False when the pool should give up."""
        assert child.process is not None
        _mark_dead(child.process.pid, self._multiproc_dir)
        now = time.monotonic()
        child.crashes = [t for t in child.crashes if now - t < self.policy.crash_window_s] + [now]
        if len(child.crashes) >= self.policy.crash_loop_limit:
            log.error("kvgate: gateway process %d exited with status %s; %d exits in %.0f s, stopping",
                      child.index, code, len(child.crashes), self.policy.crash_window_s)
            return False
        delay = self.policy.backoff_s(len(child.crashes))
        log.warning("kvgate: gateway process %d (pid %d) exited with status %s; restarting in %.1f s",
                    child.index, child.process.pid, code, delay)
        try:
            await asyncio.wait_for(self._stopping.wait(), delay)
            return True  # asked to stop meanwhile: nothing to restart
        except asyncio.TimeoutError:
            pass
        await self._spawn(child)
        return True

    async def _stop_all(self) -> None:
        running = [c.process for c in self.children if c.process is not None and c.process.returncode is None]
        for process in running:
            _signal(process, signal.SIGTERM)
        if not running:
            return
        waits = [asyncio.ensure_future(process.wait()) for process in running]
        _, pending = await asyncio.wait(waits, timeout=self.stop_timeout_s)
        for process in running:
            if process.returncode is None:
                log.warning("kvgate: gateway process pid %d did not stop in %.0f s; SIGKILL", process.pid,
                            self.stop_timeout_s)
                _signal(process, signal.SIGKILL)
        if pending:
            await asyncio.wait(pending)


def _signal(process: asyncio.subprocess.Process, signum: int) -> None:
    try:
        process.send_signal(signum)
    except ProcessLookupError:
        pass


def _mark_dead(pid: int, path: str) -> None:
    """Drop a dead child's ``live*`` gauge files (prometheus_client multiprocess mode)."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, path)


def child_argv(config_path: str | None) -> list[str]:
    """The command line of one child: this interpreter running ``kvgate serve --reuse-port``."""
    argv = [sys.executable, "-m", "gateway.cli", "serve", "--reuse-port"]
    if config_path:
        argv += ["--config", config_path]
    return argv
