"""What a stream whose client reads nothing costs the gateway in memory (RSS), and whether it comes back.

Starts a fast SSE upstream (a child process: a role chunk, then ``--events`` content chunks
written as fast as the socket takes them, then ``[DONE]``) and ``kvgate serve`` in front of it;
warms the gateway up with a few streams read to the end; then opens ``--streams`` raw client
sockets (a 4 KiB receive buffer) that send a streaming chat request and never read. It prints
the gateway's RSS (``/proc/PID/status`` VmRSS) before, while the streams are held (after it
stops growing), and after the clients have gone, for two kinds of stream:

* ``continuable``: a plain chat stream (relayed event by event; its text is kept for a
  mid-stream continuation, ``gateway/continuation.py``);
* ``tools``: the same with ``tools`` (never continued: nothing kept).

    python -m bench.stream_memory [--streams 10] [--events 200000]

``--code DIR`` runs the gateway from another checkout's sources (e.g. an export of the commit
before a change), for a before/after table with the same script.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import httpx
import orjson

from bench.procs import Child, free_port_block, kvgate_command, start, wait_ready

MESSAGES = [{"role": "user", "content": "talk"}]
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def _event(delta: dict[str, object], finish: str | None = None) -> bytes:
    chunk = {"id": "chatcmpl-m", "object": "chat.completion.chunk", "created": 1, "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


async def _upstream(port: int, events: int) -> None:
    word = _event({"content": " token"})

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0)
                if length:
                    await reader.readexactly(length)
                if not head.startswith(b"POST"):
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    continue
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
                writer.write(_event({"role": "assistant", "content": ""}))
                for index in range(events):
                    writer.write(word)
                    if index % 64 == 0:
                        await writer.drain()
                writer.write(_event({}, "stop") + b"data: [DONE]\n\n")
                await writer.drain()
                writer.close()
                return
        except (ConnectionError, asyncio.IncompleteReadError):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _settled_rss(pid: int, quiet_s: float = 3.0, limit_s: float = 60.0) -> int:
    """RSS once it has not grown for ``quiet_s`` (at most ``limit_s``)."""
    start_at, last, last_change = time.monotonic(), _rss_kib(pid), time.monotonic()
    while time.monotonic() - last_change < quiet_s and time.monotonic() - start_at < limit_s:
        time.sleep(0.5)
        now = _rss_kib(pid)
        if now > last + 64:
            last, last_change = now, time.monotonic()
    return _rss_kib(pid)


def _hold(port: int, count: int, body: dict[str, object]) -> list[socket.socket]:
    payload = orjson.dumps(body)
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n" % len(payload)) + payload
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", port))
        sock.sendall(request)
        sockets.append(sock)
    return sockets


def _config(path: Path, port: int, upstream: int) -> None:
    path.write_text("\n".join([
        "[server]", 'host = "127.0.0.1"', f"port = {port}", 'log_level = "warning"', "",
        "[health]", "interval_s = 60", "", "[upstream.timeouts]", "idle_s = 600", "",
        "[clusters.c]", "[[clusters.c.endpoints]]", 'name = "u"', f'url = "http://127.0.0.1:{upstream}/v1"', 'model = "m"', "",
        "[models.m]", 'cluster = "c"', "",
    ]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--code", type=Path, default=None, help="run the gateway from this source tree")
    parser.add_argument("--upstream-port", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream_port is not None:
        asyncio.run(_upstream(args.upstream_port, args.events))
        return
    port = free_port_block(2)
    with tempfile.TemporaryDirectory() as tmp:
        logs, config = Path(tmp), Path(tmp) / "kvgate.toml"
        _config(config, port, port + 1)
        upstream = start("upstream", [sys.executable, "-m", "bench.stream_memory", "--upstream-port", str(port + 1),
                                      "--events", str(args.events)], logs)
        if args.code is not None:
            os.environ["PYTHONPATH"] = f"{args.code}:{os.environ.get('PYTHONPATH', '')}"
        gateway: Child = start("kvgate", kvgate_command(config), logs)
        try:
            asyncio.run(wait_ready(f"http://127.0.0.1:{port}/health", gateway))
            _run(port, gateway.process.pid, args.streams)
        finally:
            gateway.stop()
            upstream.stop()


def _run(port: int, pid: int, streams: int) -> None:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    print(f"{'stream kind':<12} {'streams':>7} {'RSS before':>11} {'RSS held':>9} {'per stream':>10} {'RSS after':>10}")
    for kind, extra in (("continuable", {}), ("tools", {"tools": TOOLS})):
        body = {"model": "m", "messages": MESSAGES, "stream": True, **extra}
        for _ in range(3):  # warm-up: streams read to the end
            with httpx.stream("POST", url, json=body, timeout=120) as response:
                for _ in response.iter_bytes():
                    pass
        before = _settled_rss(pid)
        sockets = _hold(port, streams, body)
        held = _settled_rss(pid)
        for sock in sockets:
            sock.close()
        time.sleep(2)
        after = _settled_rss(pid)
        per = (held - before) / streams / 1024
        print(f"{kind:<12} {streams:>7} {before / 1024:>8.1f} MB {held / 1024:>6.1f} MB {per:>7.2f} MB {after / 1024:>7.1f} MB")


if __name__ == "__main__":
    main()
