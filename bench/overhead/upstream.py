"""The fake upstream: the cheapest OpenAI-compatible server we could write, so that what a run
measures is the gateway, not the engine behind it.

A raw ``asyncio.Protocol`` over ``httptools`` (the C parser uvicorn uses; it handles keep-alive
and chunked request bodies) on uvloop when installed. No framework, no JSON parsing: the request
body is only searched for two byte patterns.

    POST .../chat/completions, .../completions
        non-streaming: one fixed chat.completion JSON (Content-Length)
        ``"stream": true``: a role chunk and ``--chunks`` content chunks (chunked transfer
        encoding), the role chunk and the first content chunk written with the headers (as vLLM
        sends them: both when the first token is out), then one every ``--interval-ms``, a usage
        chunk, ``data: [DONE]``
        a prompt containing ``kvgate-bench-hold-<S>``: a slow stream, one chunk per second for
        S seconds (the 1,000-open-streams memory check)
    GET /health                 200
    GET /metrics                vLLM-like Prometheus text (so kvgate's scraper sees an engine)
    GET /v1/models              one model
    any other GET               200 with a small JSON object (routers probe /get_server_info ...)

    python -m bench.overhead.upstream --port 9000 [--port 9001 ...] [--chunks 16] [--interval-ms 1]

Several ``--port`` options: one process listening on each (a cluster of endpoints for
``bench.overhead --endpoints N``); the counters behind ``/metrics`` are per port.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal

import httptools

MODEL = "bench-model"
HOLD_MARKER = "kvgate-bench-hold-"
_HOLD = re.compile(rb"kvgate-bench-hold-(\d+)")
_STREAM = re.compile(rb'"stream"\s*:\s*true')

_COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hello " * 16}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 16, "completion_tokens": 16, "total_tokens": 32},
    },
    separators=(",", ":"),
).encode()


def _chunk(delta: dict[str, str], finish: str | None = None, usage: dict[str, int] | None = None) -> bytes:
    event: dict[str, object] = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": MODEL,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage is not None:
        event["usage"] = usage
    data = b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


_FIRST = _chunk({"role": "assistant", "content": ""})
_TOKEN = _chunk({"content": "hello "})
_LAST = _chunk({}, "stop", {"prompt_tokens": 16, "completion_tokens": 16, "total_tokens": 32})
_DONE = b"%x\r\n%s\r\n0\r\n\r\n" % (len(b"data: [DONE]\n\n"), b"data: [DONE]\n\n")


def _response(status: str, content_type: str, body: bytes, keep_alive: bool = True) -> bytes:
    connection = b"keep-alive" if keep_alive else b"close"
    head = f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n".encode()
    return head + b"connection: " + connection + b"\r\n\r\n" + body


_STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
_MODELS = json.dumps(
    {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench", "max_model_len": 32768}]}
).encode()
_INFO = json.dumps({"model_path": MODEL, "tokenizer_path": None, "is_generation": True, "version": "bench"}).encode()


class Counters:
    """What the process has served; ``running`` feeds the fake ``vllm:num_requests_running``."""

    def __init__(self) -> None:
        self.running = 0
        self.done = 0

    def metrics(self) -> bytes:
        labels = f'model_name="{MODEL}"'
        lines = [
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {self.running}",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{labels}}} 0",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{labels}}} 0.01",
            "# TYPE vllm:prefix_cache_queries_total counter",
            f"vllm:prefix_cache_queries_total{{{labels}}} {self.done * 16}",
            "# TYPE vllm:prefix_cache_hits_total counter",
            f"vllm:prefix_cache_hits_total{{{labels}}} 0",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{{labels},finished_reason="stop"}} {self.done}',
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="16",num_gpu_blocks="65536",cache_dtype="auto",{labels}}} 1',
        ]
        return ("\n".join(lines) + "\n").encode()


class UpstreamProtocol(asyncio.Protocol):
    """One client connection: parse with httptools, answer from precomputed bytes."""

    def __init__(self, counters: Counters, chunks: int, interval_s: float) -> None:
        self.counters = counters
        self.chunks = chunks
        self.interval_s = interval_s
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []
        self.streaming = False  # a stream is being written: the next request waits (no pipelining)
        self.timer: asyncio.TimerHandle | None = None

    # ---- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's transports are not asyncio.Transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
            self.counters.running -= 1
        self.transport = None

    # ---- httptools callbacks
    def on_message_begin(self) -> None:
        self.url = b""
        self.body = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        transport = self.transport
        if transport is None:
            return
        keep_alive = self.parser.should_keep_alive()
        path = self.url.split(b"?", 1)[0]
        if self.parser.get_method() == b"POST":
            body = b"".join(self.body)
            if path.endswith(b"/completions"):
                if _STREAM.search(body):
                    hold = _HOLD.search(body)
                    if hold:
                        self._stream(int(hold.group(1)), 1.0)
                    else:
                        self._stream(self.chunks, self.interval_s)
                    return
                self.counters.done += 1
                transport.write(_response("200 OK", "application/json", _COMPLETION, keep_alive))
            else:
                transport.write(_response("404 Not Found", "application/json", b'{"error":"not found"}', keep_alive))
        elif path == b"/metrics":
            transport.write(_response("200 OK", "text/plain; version=0.0.4", self.counters.metrics(), keep_alive))
        elif path in (b"/v1/models", b"/models"):
            transport.write(_response("200 OK", "application/json", _MODELS, keep_alive))
        elif path == b"/health":
            transport.write(_response("200 OK", "application/json", b"{}", keep_alive))
        else:
            transport.write(_response("200 OK", "application/json", _INFO, keep_alive))
        if not keep_alive:
            transport.close()

    # ---- streaming
    def _stream(self, chunks: int, interval_s: float) -> None:
        assert self.transport is not None
        self.counters.running += 1
        # the role chunk and the first content chunk together, as vLLM writes them: its chat stream builds
        # the role delta in the first iteration of the engine's output generator, i.e. with the first
        # token (vllm/entrypoints/openai/chat_completion/serving.py, `if first_iteration:`)
        self.transport.write(_STREAM_HEAD + _FIRST + (_TOKEN if chunks > 0 else b""))
        self._next(chunks - 1, interval_s)

    def _next(self, left: int, interval_s: float) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        if left <= 0:
            self.timer = None
            self.counters.running -= 1
            self.counters.done += 1
            transport.write(_LAST + _DONE)
            return
        if interval_s <= 0:
            transport.write(_TOKEN * left + _LAST + _DONE)
            self.timer = None
            self.counters.running -= 1
            self.counters.done += 1
            return
        self.timer = asyncio.get_running_loop().call_later(interval_s, self._tick, left, interval_s)

    def _tick(self, left: int, interval_s: float) -> None:
        if self.transport is not None:
            self.transport.write(_TOKEN)
        self._next(left - 1, interval_s)


async def serve(host: str, ports: list[int], chunks: int, interval_s: float) -> None:
    loop = asyncio.get_running_loop()
    servers = []
    for port in ports:
        counters = Counters()
        servers.append(await loop.create_server(
            lambda counters=counters: UpstreamProtocol(counters, chunks, interval_s), host, port, backlog=4096, reuse_address=True
        ))
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    for server in servers:
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, action="append", required=True, help="repeat for several endpoints")
    parser.add_argument("--chunks", type=int, default=16, help="content chunks of a normal stream")
    parser.add_argument("--interval-ms", type=float, default=1.0, help="between two chunks of a normal stream")
    args = parser.parse_args(argv)
    coro = serve(args.host, args.port, args.chunks, args.interval_ms / 1000)
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)
    else:
        uvloop.run(coro)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
