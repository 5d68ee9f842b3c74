"""``kvgate serve --processes 2``: two real gateway processes on one port, state in the real Redis.

Started from the console script as an operator would; the official ``openai`` SDK as client. What
must hold:

* both processes accept connections on the one port (SO_REUSEPORT);
* a key's requests-per-minute limit is enforced once across them (the shared store);
* ``GET /metrics`` counts every process's requests, whichever process answers the scrape;
* a process that dies is restarted and the port keeps answering meanwhile;
* SIGTERM to the parent stops every process, exit status 0;
* Ctrl-C (SIGINT to the whole process group, so each child is signalled twice) lets streams in
  flight finish, exit status 0, no traceback;
* a SIGKILLed parent takes its children with it (the port is freed);
* more than one process with the ``memory`` state backend, or with a Redis that does not answer,
  is refused with a clear error (exit 2).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from bench import procs
from tests.support.fake_upstream import FakeUpstream
from tests.support.ops import REDIS_URL, drop_prefix, redis_prefix, toml_config

LIMITED = "sk-processes-limited"
FREE = "sk-processes-free"


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream("up").start()
    yield fake
    fake.stop()


def _config(tmp_path: Path, port: int, upstream: FakeUpstream, backend: str = "redis", prefix: str = "") -> Path:
    state: dict[str, object] = {"backend": backend}
    if backend == "redis":
        state |= {"redis_url": REDIS_URL, "key_prefix": prefix}
    config = {
        "server": {"port": port, "log_level": "warning"},
        "auth": {"keys": [{"name": "limited", "key": LIMITED, "rpm": 4}, {"name": "free", "key": FREE}]},
        "state": state,
        "health": {"interval_s": 60},
        "clusters": {"fast": {"endpoints": [{"name": "e0", "url": upstream.base_url, "model": "m"}]}},
        "models": {"m": {"cluster": "fast"}},
    }
    path = tmp_path / "kvgate.toml"
    path.write_text(toml_config(config))
    return path


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _wait_children(pid: int, count: int, timeout_s: float = 30.0, exclude: set[int] = frozenset()) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        children = [c for c in _children(pid) if c not in exclude]
        if len(children) >= count:
            return children
        time.sleep(0.1)
    raise AssertionError(f"expected {count} gateway processes under {pid}, have {_children(pid)}")


@pytest.fixture
def pool(tmp_path: Path, upstream: FakeUpstream) -> Iterator[tuple[str, procs.Child]]:
    prefix = redis_prefix()
    port = procs.free_port_block(1)
    config = _config(tmp_path, port, upstream, prefix=prefix)
    child = procs.start("kvgate-processes", [*procs.kvgate_command(config), "--processes", "2"], tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        asyncio.run(procs.wait_ready(f"{url}/health", child))
        _wait_children(child.process.pid, 2)
        # both processes listen before the test starts (the first may answer /health alone)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all(_listening(pid, port) for pid in _children(child.process.pid)):
                break
            time.sleep(0.1)
        yield url, child
    finally:
        child.stop(grace_s=20)
        drop_prefix(prefix)


def _listening(pid: int, port: int) -> bool:
    """True when ``pid`` holds a listening socket on ``port`` (from /proc/PID/net/tcp and its fds)."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        with open(f"/proc/{pid}/net/tcp") as f:
            rows = f.read().splitlines()[1:]
    except (FileNotFoundError, ProcessLookupError):
        return False
    for row in rows:
        cols = row.split()
        if cols[1].endswith(f":{port:04X}") and cols[3] == "0A" and cols[9] in inodes:
            return True
    return False


def _client(url: str, key: str) -> openai.OpenAI:
    # a fresh connection per request: the kernel spreads connections, not requests, over the processes
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0,
                         http_client=httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)))


def test_both_processes_serve_the_one_port(pool: tuple[str, procs.Child]) -> None:
    url, child = pool
    pids = _children(child.process.pid)
    assert len(pids) == 2 and all(_listening(pid, int(url.rsplit(":", 1)[1])) for pid in pids)
    before = {pid: _cpu_ticks(pid) for pid in pids}
    client = _client(url, FREE)
    for i in range(300):
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"hi {i}"}], max_tokens=3)
        assert reply.choices[0].message.content
    used = {pid: _cpu_ticks(pid) - before[pid] for pid in pids}
    # each process spent CPU time serving (one clock tick is 10 ms; a process's idle timers use ~0)
    assert all(ticks >= 5 for ticks in used.values()), used


def test_rpm_limit_is_enforced_once_across_processes(pool: tuple[str, procs.Child]) -> None:
    url, _ = pool
    client = _client(url, LIMITED)
    outcomes = []
    for i in range(8):
        try:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"q{i}"}], max_tokens=3)
            outcomes.append(200)
        except openai.RateLimitError as error:
            assert error.body and error.body.get("type")  # OpenAI-shaped error
            outcomes.append(429)
    assert outcomes.count(200) == 4, outcomes


def test_metrics_count_every_process(pool: tuple[str, procs.Child]) -> None:
    url, _ = pool
    client = _client(url, FREE)
    sent = 40
    for i in range(sent):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"m{i}"}], max_tokens=3)
    for _ in range(6):  # whichever process answers the scrape, the total is the same
        text = httpx.get(f"{url}/metrics", headers={"Connection": "close"}).text
        counted = sum(float(v) for v in re.findall(
            r'^kvgate_requests_total\{[^}]*outcome="success"[^}]*\} (\S+)$', text, re.MULTILINE))
        assert counted == sent
        assert "kvgate_endpoint_circuit_state" in text  # the answering process's scrape-time view


def test_a_dead_process_is_restarted_while_the_port_answers(pool: tuple[str, procs.Child]) -> None:
    url, child = pool
    first, second = _children(child.process.pid)
    os.kill(first, signal.SIGKILL)
    client = _client(url, FREE)
    ok = 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=3)
        ok += bool(reply.choices[0].message.content)
        now = _children(child.process.pid)
        if len(now) == 2 and first not in now:
            break
    now = _children(child.process.pid)
    assert second in now and first not in now and len(now) == 2, now
    assert ok >= 1 and child.process.poll() is None


def test_sigterm_stops_every_process(pool: tuple[str, procs.Child]) -> None:
    url, child = pool
    pids = _children(child.process.pid)
    child.process.send_signal(signal.SIGTERM)
    assert child.process.wait(30) == 0
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health")


def test_several_processes_with_memory_state_are_refused(tmp_path: Path, upstream: FakeUpstream) -> None:
    config = _config(tmp_path, procs.free_port_block(1), upstream, backend="memory")
    result = subprocess.run([*procs.kvgate_command(config), "--processes", "2"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert 'state.backend = "redis"' in result.stderr and "Traceback" not in result.stderr


def _stream_text(url: str, started: threading.Semaphore | None = None) -> str:
    client = _client(url, FREE)
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "long"}], stream=True,
                                            extra_body={"fake": "slow_stream"})
    parts = []
    for chunk in stream:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason
            if started is not None and len(parts) == 1:
                started.release()  # this stream has its first words
    assert finish == "stop"
    return "".join(parts)


def test_ctrl_c_to_the_process_group_lets_streams_finish(pool: tuple[str, procs.Child]) -> None:
    url, child = pool
    with concurrent.futures.ThreadPoolExecutor(4) as threads:
        started = threading.Semaphore(0)
        streams = [threads.submit(_stream_text, url, started) for _ in range(4)]
        for _ in streams:  # every stream has its first words (not a fixed sleep: a loaded machine is slow)
            assert started.acquire(timeout=30), "a stream got no first words"
        os.killpg(child.process.pid, signal.SIGINT)  # as a terminal's Ctrl-C: parent and children
        texts = [stream.result(timeout=30) for stream in streams]
    assert texts == ["".join(f" w{i}" for i in range(10))] * 4
    assert child.process.wait(30) == 0
    log = child.log.read_text()
    assert "Traceback" not in log and "CancelledError" not in log, log[-2000:]


def test_a_killed_parent_takes_its_children_along(pool: tuple[str, procs.Child]) -> None:
    url, child = pool
    pids = _children(child.process.pid)
    child.process.kill()
    child.process.wait(10)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in pids), "children outlived their SIGKILLed parent"
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"{url}/health")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_several_processes_need_a_redis_that_answers(tmp_path: Path, upstream: FakeUpstream) -> None:
    config = _config(tmp_path, procs.free_port_block(1), upstream, prefix="kvgate-test-down:")
    config.write_text(config.read_text().replace("127.0.0.1:6379", "127.0.0.1:1"))
    result = subprocess.run([*procs.kvgate_command(config), "--processes", "2"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "state.redis_url" in result.stderr and "Traceback" not in result.stderr


def test_a_process_that_keeps_exiting_stops_the_pool_with_status_1() -> None:
    import sys

    from gateway.process_pool import GatewayProcessPool

    pool = GatewayProcessPool([sys.executable, "-c", "raise SystemExit(3)"], 1)
    assert asyncio.run(pool.run()) == 1  # five exits within the crash window (backoff 0.5, 1, 2, 4 s)
