"""A scripted upstream on raw TCP, for failover conformance tests.

Unlike the aiohttp fake, it controls every byte and boundary: when the status line and headers
go out, how the body is cut into writes, delays before headers or between chunks, and whether the
connection ends with a clean close (FIN) or a TCP reset (RST, via SO_LINGER 0).

Each request is answered by the next step list from ``ScriptedUpstream.scripts`` (a queue; the
last script repeats when the queue runs dry). Steps:

    ("status", 200)                     status line + headers (SSE for streams, JSON otherwise)
    ("chunk", b"data: ...\\n\\n")       one write of the body (HTTP/1.1 chunked encoding)
    ("sleep", seconds)                  wait before the next step
    ("end",)                            the terminating zero-length chunk (clean end of body)
    ("close",)                          clean TCP close, wherever we are
    ("reset",)                          TCP reset, wherever we are
    ("counter", n_before_fault)         an SSE answer counting " one two ... ten"; continues from
                                        a partial assistant message / prompt if the request asks
                                        to (vLLM's continue_final_message); stops after
                                        ``n_before_fault`` words if given (then the next steps run);
                                        its usage chunk only if ``stream_options.include_usage``
                                        (as vLLM), and ``"usage": null`` in every other chunk then
                                        if ``usage_null`` is set (as OpenAI)
    ("refuse_stream_options"[, status])  a 400 (or ``status``) naming ``stream_options`` if the request has it
                                        (as some managed providers); otherwise the next steps run
    ("gzip_json", status, payload)      a JSON answer compressed with gzip (``Content-Encoding``)
    ("gzip_counter",)                   the counter's SSE answer, each event gzip-compressed and
                                        flushed (``Z_SYNC_FLUSH``), as a compressing proxy sends it

Every request is recorded as ``(headers: dict, body: dict)`` in ``requests``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import zlib
from collections import deque
from typing import Any

import orjson

WORDS = [" one", " two", " three", " four", " five", " six", " seven", " eight", " nine", " ten"]


def sse(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else orjson.dumps(payload).decode()
    return f"data: {data}\n\n".encode()


def chunk_event(content: str | None = None, *, role: bool = False, finish: str | None = None, text: bool = False) -> bytes:
    if text:
        choice: dict[str, Any] = {"index": 0, "text": content or "", "finish_reason": finish, "logprobs": None}
        return sse({"id": "cmpl-up", "object": "text_completion", "created": 42, "model": "m", "choices": [choice]})
    delta: dict[str, Any] = {}
    if role:
        delta = {"role": "assistant", "content": ""}
    elif content is not None:
        delta = {"content": content}
    return sse(
        {
            "id": "chatcmpl-up",
            "object": "chat.completion.chunk",
            "created": 42,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
    )


ERROR_EVENT = sse({"error": {"message": "EngineCore encountered an issue", "type": "InternalServerError", "param": None, "code": 500}})


class ScriptedUpstream:
    def __init__(self, name: str) -> None:
        self.name = name
        self.scripts: deque[list[tuple[Any, ...]]] = deque([[("counter", None)]])
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.port = 0
        self.usage_null = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def script(self, *scripts: list[tuple[Any, ...]]) -> None:
        """Answer the next requests with these scripts, the last one repeating."""
        self.scripts = deque(scripts)
        self.requests.clear()

    def start(self) -> ScriptedUpstream:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._loop is not None and self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def _main(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._server = loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        loop.run_forever()
        loop.run_until_complete(self._shutdown())
        loop.close()

    async def _shutdown(self) -> None:
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert self._server is not None
        await self._server.wait_closed()

    def _next_script(self) -> list[tuple[Any, ...]]:
        return self.scripts.popleft() if len(self.scripts) > 1 else self.scripts[0]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                headers, body = request
                if not headers.get(":path", "").startswith("/v1/"):
                    writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")  # /health
                    await writer.drain()
                    continue
                self.requests.append((headers, body))
                if not await self._run(self._next_script(), body, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            return
        finally:
            if not writer.is_closing():
                writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _run(self, steps: list[tuple[Any, ...]], body: dict[str, Any], writer: asyncio.StreamWriter) -> bool:
        """Play ``steps``; False when the connection was closed or reset."""
        for step in steps:
            kind = step[0]
            if kind == "status":
                await _status(writer, step[1], stream=bool(body.get("stream")))
            elif kind == "chunk":
                _write_chunk(writer, step[1])
                await writer.drain()
            elif kind == "sleep":
                await asyncio.sleep(step[1])
            elif kind == "end":
                writer.write(b"0\r\n\r\n")
                await writer.drain()
            elif kind == "close":
                writer.close()
                return False
            elif kind == "reset":
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
                return False
            elif kind == "counter":
                await self._counter(writer, body, step[1])
            elif kind == "refuse_stream_options" and "stream_options" in body:
                error = {"error": {"message": "Unrecognized request argument supplied: stream_options",
                                   "type": "invalid_request_error", "param": "stream_options", "code": None}}
                await self._run([("json", step[1] if len(step) > 1 else 400, error)], body, writer)
                return True
            elif kind == "gzip_json":
                payload = zlib.compress(orjson.dumps(step[2]), wbits=31)
                writer.write(f"HTTP/1.1 {step[1]} X\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
                             f"content-length: {len(payload)}\r\n\r\n".encode() + payload)
                await writer.drain()
            elif kind == "gzip_counter":
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-encoding: gzip\r\n"
                             b"transfer-encoding: chunked\r\n\r\n")
                gzip = zlib.compressobj(wbits=31)
                for event in self.counter_events(body):
                    _write_chunk(writer, gzip.compress(event) + gzip.flush(zlib.Z_SYNC_FLUSH))
                    await writer.drain()
                _write_chunk(writer, gzip.flush())
                writer.write(b"0\r\n\r\n")
                await writer.drain()
            elif kind == "json":
                payload = orjson.dumps(step[2])
                writer.write(f"HTTP/1.1 {step[1]} X\r\ncontent-type: application/json\r\ncontent-length: {len(payload)}\r\n".encode())
                for name, value in (step[3] if len(step) > 3 else {}).items():
                    writer.write(f"{name}: {value}\r\n".encode())
                writer.write(b"\r\n" + payload)
                await writer.drain()
        return True

    async def _counter(self, writer: asyncio.StreamWriter, body: dict[str, Any], stop_after: int | None) -> None:
        text = "prompt" in body
        partial = body["prompt"].split("|", 1)[1] if text and "|" in body["prompt"] else ""
        if body.get("continue_final_message"):
            partial = body["messages"][-1]["content"]
        done = sum(1 for word in WORDS if word in partial)
        if not body.get("stream"):
            content = "".join(WORDS[done:])
            message = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
            payload = orjson.dumps({"id": "chatcmpl-up", "object": "chat.completion", "created": 42, "model": "m", "choices": [message],
                                    "usage": {"prompt_tokens": 5, "completion_tokens": len(WORDS) - done, "total_tokens": 15}})
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(payload) + payload)
            await writer.drain()
            return
        await _status(writer, 200, stream=True)
        events = self.counter_events(body)
        for index, event in enumerate(events):
            if stop_after is not None and index >= stop_after + (0 if text else 1):
                await writer.drain()
                return
            _write_chunk(writer, event)
            await writer.drain()
            if index < len(events) - 3:
                await asyncio.sleep(0.001)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    def counter_events(self, body: dict[str, Any]) -> list[bytes]:
        """The SSE events of the counter's streamed answer to ``body`` (see the module doc)."""
        text = "prompt" in body
        partial = body["prompt"].split("|", 1)[1] if text and "|" in body["prompt"] else ""
        if body.get("continue_final_message"):
            partial = body["messages"][-1]["content"]
        done = sum(1 for word in WORDS if word in partial)
        usage_asked = bool((body.get("stream_options") or {}).get("include_usage"))
        events = [] if text else [chunk_event(role=True)]
        events += [chunk_event(word, text=text) for word in WORDS[done:]]
        events.append(chunk_event(finish="stop", text=text))
        if usage_asked and self.usage_null:
            events = [event[:-3] + b',"usage":null}\n\n' for event in events]
        if usage_asked:
            usage = {"prompt_tokens": 5 + done, "completion_tokens": len(WORDS) - done, "total_tokens": 15}
            events.append(sse({"id": "chatcmpl-up", "object": "chat.completion.chunk", "created": 42, "model": "m", "choices": [], "usage": usage}))
        return [*events, b"data: [DONE]\n\n"]


async def _status(writer: asyncio.StreamWriter, status: int, stream: bool) -> None:
    content_type = "text/event-stream" if stream else "application/json"
    writer.write(f"HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n".encode())
    await writer.drain()


def _write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))


async def _read_request(reader: asyncio.StreamReader) -> tuple[dict[str, str], dict[str, Any]] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    headers = {":method": method, ":path": path}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    raw = await reader.readexactly(length) if length else b""
    return headers, (orjson.loads(raw) if raw else {})
