"""One worker OS process: start it in its own process group, wait until healthy, stop the group.

vLLM's process tree is API server -> EngineCore -> Worker. SIGKILL to the API server alone
orphans the other two (about 3 GB on CPU), so every worker starts in a new session
(``start_new_session=True``: its own session and process group) and is always signalled as a
group: ``stop`` sends SIGTERM to the group (vLLM exits in about 2.5 s), waits up to
``timeout_s`` for every member to be gone, then sends SIGKILL to the group.

Stdout and stderr go to one log file (rewritten at each start); start-up failures raise
:class:`~backends.errors.WorkerStartError` naming the root cause found in the log (the exception
line and its frame, ``backends.workers.log_cause``) and the log's path, or, without a traceback, carrying
the log's last 40 lines (:func:`failure_report`).

"Gone" means no live (non-zombie) process has the group id: on Linux this is read from
``/proc/*/stat`` so that zombies left for a non-reaping PID 1 do not count; elsewhere
``killpg(pgid, 0)`` is used. Once the group is seen gone it is never signalled again (the id could
be reused).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import aiohttp

from backends.errors import WorkerStartError
from backends.workers.log_cause import root_cause
from backends.workers.spec import WorkerSpec
from backends.workers.vllm_args import worker_argv, worker_env

LOG_TAIL_LINES = 40
_KILL_GRACE_S = 5.0
_POLL_S = 0.05


RESPONSES_STORE_ENV = "VLLM_ENABLE_RESPONSES_API_STORE"
"""vLLM keeps stored Responses (in the worker's memory) only with this set to ``1``."""


class WorkerProcess:
    """A child process in its own process group, with an HTTP health URL.

    Build one from a spec with :meth:`for_spec`, or from any argv (tests use a dummy child).
    Not thread-safe; use from one event loop (``stop_sync`` excepted, for atexit handlers).
    """

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str], log_path: Path,
                 health_url: str, name: str = "worker") -> None:
        self.argv = list(argv)
        self.env = dict(env)
        self.log_path = Path(log_path)
        self.health_url = health_url
        self.name = name
        self._proc: asyncio.subprocess.Process | None = None
        self._group_gone = False

    @classmethod
    def for_spec(cls, spec: WorkerSpec, python: str | Path, log_path: Path, *,
                 base_env: Mapping[str, str] | None = None, name: str = "worker") -> WorkerProcess:
        """A vLLM worker for ``spec`` run by ``python``; ``base_env`` defaults to ``os.environ``.

        The worker stores Responses (``VLLM_ENABLE_RESPONSES_API_STORE=1``, unless ``base_env``
        sets it): kvgate routes ``previous_response_id`` and ``GET /v1/responses/{id}`` to the
        worker holding them (``gateway/api_director.py``); without it vLLM answers those 404."""
        env = worker_env(spec, os.environ if base_env is None else base_env)
        env.setdefault(RESPONSES_STORE_ENV, "1")
        return cls(worker_argv(spec, str(python)), env=env, log_path=log_path,
                   health_url=f"{spec.origin}/health", name=name)

    @property
    def pid(self) -> int | None:
        """Process id of the leader (also the process group id), or None before ``start``."""
        return None if self._proc is None else self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The leader's exit code once it has been reaped, else None."""
        return None if self._proc is None else self._proc.returncode

    async def start(self) -> None:
        """Spawn the process in a new session, stdout+stderr appended to ``log_path``.

        Raises :class:`WorkerStartError` if it cannot be spawned, ``RuntimeError`` if started twice.
        """
        if self._proc is not None:
            raise RuntimeError(f"{self.name}: already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            log.write(f"# {self.name}: {' '.join(self.argv)}\n".encode())
            log.flush()
            try:
                self._proc = await asyncio.create_subprocess_exec(
                    *self.argv, stdin=asyncio.subprocess.DEVNULL, stdout=log,
                    stderr=asyncio.subprocess.STDOUT, env=self.env, start_new_session=True)
            except OSError as exc:
                raise WorkerStartError(f"{self.name}: cannot start {self.argv[0]!r}: {exc}") from exc

    async def wait_healthy(self, timeout_s: float = 300.0, *, poll_interval_s: float = 0.5) -> None:
        """Poll ``health_url`` until it answers 200.

        Raises :class:`WorkerStartError` (with the log tail) if the process exits first or
        ``timeout_s`` seconds pass. Does not stop the process on failure: call :meth:`stop`.
        """
        proc = self._require_started()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        probe_timeout = aiohttp.ClientTimeout(total=min(5.0, max(timeout_s, 0.1)))
        async with aiohttp.ClientSession(timeout=probe_timeout) as session:
            while True:
                if proc.returncode is not None:
                    raise self._start_error(f"exited with code {proc.returncode} before it became healthy")
                if await _probe(session, self.health_url):
                    return
                if loop.time() >= deadline:
                    raise self._start_error(f"not healthy at {self.health_url} after {timeout_s:g} s")
                await asyncio.sleep(poll_interval_s)

    async def wait(self) -> int:
        """Wait until the leader (vLLM's API server) exits; return its exit code.

        The rest of the group may outlive it (an orphaned EngineCore): call :meth:`stop` after.
        """
        return await self._require_started().wait()

    async def stop(self, timeout_s: float = 15.0) -> int | None:
        """SIGTERM the process group, wait up to ``timeout_s``, then SIGKILL the group.

        Idempotent; returns the leader's exit code (None if never started).
        """
        if self._proc is None:
            return None
        pgid = self._proc.pid
        if not self._group_gone:
            _signal_group(pgid, signal.SIGTERM)
            if not await self._wait_group_gone(pgid, timeout_s):
                _signal_group(pgid, signal.SIGKILL)
                await self._wait_group_gone(pgid, _KILL_GRACE_S)
        return await self._proc.wait()

    def stop_sync(self, timeout_s: float = 15.0) -> None:
        """Blocking :meth:`stop` for atexit or signal handlers (does not reap the leader)."""
        if self._proc is None or self._group_gone:
            return
        pgid = self._proc.pid
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _group_alive(pgid) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        if _group_alive(pgid):
            _signal_group(pgid, signal.SIGKILL)
            deadline = time.monotonic() + _KILL_GRACE_S
            while _group_alive(pgid) and time.monotonic() < deadline:
                time.sleep(_POLL_S)
        self._group_gone = not _group_alive(pgid)

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the log file ('' if it cannot be read)."""
        return tail_lines(self.log_path, lines)

    async def _wait_group_gone(self, pgid: int, timeout_s: float) -> bool:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while _group_alive(pgid):
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(_POLL_S)
        self._group_gone = True
        return True

    def _require_started(self) -> asyncio.subprocess.Process:
        if self._proc is None:
            raise RuntimeError(f"{self.name}: not started")
        return self._proc

    def _start_error(self, what: str) -> WorkerStartError:
        return WorkerStartError(failure_report(f"{self.name} {what}", self.log_path))


_CAUSE_SCAN_BYTES = 4 * 1024 * 1024


def failure_report(what: str, log_path: Path) -> str:
    """``what``, then the root cause in the log at ``log_path`` and the path; else the log's tail.

    ``local-0 exited with code 1 before it became healthy: NotImplementedError: FP8 KV cache on CPU
    requires x86 with AVX-512 or AMX.`` then the frame that raised it and ``(log: PATH)``. The
    last :data:`_CAUSE_SCAN_BYTES` of the log are searched.
    """
    cause = root_cause(tail_lines(log_path, 1_000_000, max_bytes=_CAUSE_SCAN_BYTES))
    if cause is None:
        return f"{what}; last lines of {log_path}:\n{tail_lines(log_path, LOG_TAIL_LINES)}"
    lines = cause.lines()
    if cause.exception in what:  # the supervisor's last_error already names it
        return "\n".join([what, *lines[1:], f"(log: {log_path})"])
    return f"{what}: " + "\n".join([*lines, f"(log: {log_path})"])


def failure_cause(log_path: Path) -> str | None:
    """The root cause's exception line in the log at ``log_path`` (None without a traceback)."""
    cause = root_cause(tail_lines(log_path, 1_000_000, max_bytes=_CAUSE_SCAN_BYTES))
    return None if cause is None else cause.exception


async def _probe(session: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with session.get(url) as response:
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


def tail_lines(path: Path, lines: int, *, max_bytes: int = 256 * 1024) -> str:
    """The last ``lines`` lines of the file at ``path`` (reads at most ``max_bytes`` from its end)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def pid_alive(pid: int) -> bool:
    """True if process ``pid`` exists and is not a zombie (a dead child nobody reaped yet)."""
    stat = Path(f"/proc/{pid}/stat")
    if Path("/proc/self/stat").exists():
        try:
            data = stat.read_bytes()
        except OSError:
            return False
        return data[data.rfind(b")") + 2:][:1] not in (b"Z", b"X")
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _group_alive(pgid: int) -> bool:
    """True if a live (non-zombie) process belongs to process group ``pgid``."""
    proc_dir = Path("/proc")
    if not (proc_dir / "self" / "stat").exists():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    with os.scandir(proc_dir) as entries:
        return any(e.name.isdigit() and _stat_pgrp_live(e.path) == pgid for e in entries)


def _stat_pgrp_live(proc_path: str) -> int | None:
    """Process group of the process at ``/proc/PID``, or None if it is a zombie or gone."""
    try:
        with open(f"{proc_path}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # Format: "pid (comm) state ppid pgrp ..."; comm may hold spaces or parens, so split after ')'.
    fields = stat[stat.rfind(b")") + 2:].split()
    if len(fields) < 3 or fields[0] in (b"Z", b"X"):
        return None
    return int(fields[2])
