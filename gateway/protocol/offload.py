"""Parsing a large request body off the event loop: :func:`parse_request_async` and :class:`ParseOffload`.

Why a process, not a thread: ``orjson.loads`` holds the GIL for the whole parse (one C call), and
so do ``hashlib``/``xxhash`` on small blocks, so a thread does not free the loop: the loop's
longest gap while a worker thread parses a body equals the inline parse
(``bench/body_stall.py --thread-parse``). A worker process parses, validates and depth-checks the
body (``parse_request``, the same code as inline) and sends back the parsed body, pickled. The
bytes go both ways over the worker's stdin and stdout pipes in :data:`CHUNK` pieces, one loop
step each (``concurrent.futures.ProcessPoolExecutor`` was measured first: its pipe and pickling
threads held the GIL for 110-170 ms sending a 30 MiB body, longer than parsing it inline), so
the loop pays only ``pickle.loads`` of the answer in one piece: for a 30 MiB one-message body
10-37 ms (one large string) instead of 150-590 ms inline on a loaded 2-core host
(``python -m bench.body_stall --stages --offload`` prints both).

Below ``inline_limit`` bytes (:data:`DEFAULT_INLINE_LIMIT`, 1 MiB: the inline parse, validation
and depth check cost 0.5-1 ms there, against a round trip of 1.5 ms for 200 KiB and 5 ms for
1 MiB to a worker) the body is parsed inline: offloading small bodies only adds latency.

Errors are the inline path's errors: the worker returns an ``InvalidRequestError``'s message,
``param`` and ``code`` and the loop raises the same error (same status, same JSON). A worker
that dies (killed, out of memory, a bug raising in ``parse_request``) is replaced and the body
is parsed inline, once (so a bug raises inline, as it would have).

Nothing is shared with the worker but the bytes: the returned body is a fresh object owned by the
loop's thread, exactly as ``orjson.loads`` would have made it.

The other APIs' bodies (Responses, Messages and count_tokens, embeddings, rerank, score: the rows
of :mod:`gateway.protocol.apis` that parse a body) go the same way through
:meth:`ParseOffload.parse_api`: the worker runs the row's own ``parse`` and sends back the
:class:`~gateway.protocol.api_request.ApiRequest` without its ``raw`` bytes (the loop has them:
they are put back, on the request and on its chat-shaped ``prompt``), so a large body crosses
the pipe once each way, as for chat.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import struct
import sys
from asyncio.subprocess import PIPE
from pathlib import Path
from typing import Any

from gateway.errors import InvalidRequestError
from gateway.protocol.api_request import ApiRequest
from gateway.protocol.apis import APIS, BY_NAME
from gateway.protocol.openai import InferenceRequest, Operation, parse_request

DEFAULT_INLINE_LIMIT = 1024 * 1024
"""Bodies of at most this many bytes are parsed on the loop (see the module docstring)."""


def parse_remote(operation: str, raw: bytes) -> tuple[Any, ...]:
    """The worker's half: ``("ok", model, stream, body)`` or ``("error", message, param, code)``;
    for another API, ``("api", request)`` (its :class:`ApiRequest` with ``raw`` emptied).

    ``operation``: an :class:`Operation`'s value (a path), or an API's name (:data:`BODY_APIS`).
    Runs ``parse_request`` (or the row's ``parse``); only an ``InvalidRequestError`` is turned
    into a tuple (anything else is a bug and propagates).
    """
    try:
        if operation in BODY_APIS:
            parsed = BY_NAME[operation].parse(raw, None)
            assert isinstance(parsed, ApiRequest)
            parsed.raw = b""  # the loop holds the bytes: never sent back
            if parsed.prompt is not None:
                parsed.prompt.raw = b""
            return ("api", parsed)
        request = parse_request(Operation(operation), raw)
    except InvalidRequestError as error:
        return ("error", error.message, error.param, error.__dict__.get("code"))
    return ("ok", request.model, request.stream, request.body)


BODY_APIS: tuple[str, ...] = tuple(
    api.name for api in APIS if api.name not in ("chat", "completions") and not any("{id}" in p for p in api.paths)
)
"""The other APIs whose body is parsed (Responses, Messages, count_tokens, embeddings, rerank, score)."""

_HEADER = struct.Struct("<BQ")  # target index, payload length
_OPERATIONS = list(Operation)
_TARGETS: list[str] = [operation.value for operation in _OPERATIONS] + list(BODY_APIS)
CHUNK = 256 * 1024
"""Bytes moved per loop step to or from a worker (the loop runs other callbacks in between)."""


class _Worker:
    """One worker process: frames in on its stdin, pickled answers out on its stdout, one at a time."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.lock = asyncio.Lock()

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    async def ask(self, target: str, raw: bytes) -> tuple[Any, ...]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(_HEADER.pack(_TARGETS.index(target), len(raw)))
        view = memoryview(raw)
        for offset in range(0, len(raw), CHUNK):
            stdin.write(view[offset : offset + CHUNK])
            await stdin.drain()
        size = _HEADER.unpack(await stdout.readexactly(_HEADER.size))[1]
        answer = bytearray(size)
        for offset in range(0, size, CHUNK):
            piece = await stdout.readexactly(min(CHUNK, size - offset))
            answer[offset : offset + len(piece)] = piece
        return pickle.loads(answer)

    def kill(self) -> None:
        if self.alive:
            self.process.kill()

    async def aclose(self) -> None:
        """Kill the process and wait for it (its pipes are closed with it)."""
        self.kill()
        await self.process.wait()
        transport = getattr(self.process, "_transport", None)
        if transport is not None:
            transport.close()


class ParseOffload:
    """Worker processes (``workers``, default 1) that parse bodies over ``inline_limit`` bytes.

    Create once per app; a worker (``python -m gateway.protocol.offload``, about 0.1-0.3 s to
    start) is started by the first body over the limit (``create_app`` starts none: a gateway
    that never sees one never pays for it), or by :meth:`start`; ``await`` :meth:`aclose` at shutdown. A worker serves one body at a time; bodies are spread
    over the workers in turn. A worker that dies, or whose exchange is cancelled (the client
    left mid-transfer), is killed and replaced on the next large body.
    """

    def __init__(self, inline_limit: int = DEFAULT_INLINE_LIMIT, workers: int = 1) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.inline_limit = inline_limit
        self.workers = workers
        self._pool: list[_Worker | None] = [None] * workers
        self._next = 0
        self._reaping: set[asyncio.Task[None]] = set()  # killed workers being waited for
        self._spawning = asyncio.Lock()

    async def _spawn(self) -> _Worker:
        root = str(Path(__file__).resolve().parents[2])  # this gateway package, whatever sys.path[0] is
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": root + (os.pathsep + path if path else "")}
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "gateway.protocol.offload", stdin=PIPE, stdout=PIPE, limit=2 * CHUNK, env=env,
        )
        return _Worker(process)

    async def start(self) -> None:
        """Start every worker now rather than on the first large body."""
        for index in range(self.workers):
            if self._pool[index] is None or not self._pool[index].alive:  # type: ignore[union-attr]
                self._pool[index] = await self._spawn()

    async def aclose(self) -> None:
        """Stop the workers and wait for them (a parse in progress falls back to the inline parse)."""
        workers = [worker for worker in self._pool if worker is not None]
        self._pool = [None] * self.workers
        for worker in workers:
            await worker.aclose()

    async def parse(self, operation: Operation, raw: bytes) -> InferenceRequest:
        """What ``parse_request(operation, raw)`` returns or raises, parsed in a worker whatever
        the size (:func:`parse_request_async` decides by size)."""
        answer = await self._ask(operation.value, raw)
        if answer is None:
            return parse_request(operation, raw)  # the worker died: this body inline
        return _request_of(operation, raw, answer)

    async def parse_api(self, api: str, raw: bytes) -> ApiRequest:
        """What the row ``api`` of :data:`BODY_APIS` parses from ``raw`` (its ``ApiRequest`` or its
        ``InvalidRequestError``), parsed in a worker whatever the size (the director decides by size)."""
        answer = await self._ask(api, raw)
        if answer is None:
            parsed = BY_NAME[api].parse(raw, None)  # the worker died: this body inline
            assert isinstance(parsed, ApiRequest)
            return parsed
        if answer[0] == "error":
            _, message, param, code = answer
            raise InvalidRequestError(message, param=param, code=code)
        request: ApiRequest = answer[1]
        request.raw = raw
        if request.prompt is not None:
            request.prompt.raw = raw
        return request

    async def _ask(self, target: str, raw: bytes) -> tuple[Any, ...] | None:
        """The worker's answer for ``target`` (an operation's path or an API's name), or None when
        the worker died (the caller parses inline)."""
        index = self._next
        self._next = (index + 1) % self.workers
        worker = self._pool[index]
        if worker is None or not worker.alive:
            async with self._spawning:  # two large bodies at once: one worker started, not two
                worker = self._pool[index]
                if worker is None or not worker.alive:
                    worker = self._pool[index] = await self._spawn()
        async with worker.lock:
            try:
                return await worker.ask(target, raw)
            except BaseException as error:
                worker.kill()  # half a frame may be in the pipe: this worker is done
                if self._pool[index] is worker:
                    self._pool[index] = None
                reaper = asyncio.ensure_future(worker.aclose())
                self._reaping.add(reaper)
                reaper.add_done_callback(self._reaping.discard)
                if isinstance(error, (OSError, EOFError, asyncio.IncompleteReadError, pickle.UnpicklingError)):
                    return None
                raise


def _request_of(operation: Operation, raw: bytes, answer: tuple[Any, ...]) -> InferenceRequest:
    if answer[0] == "error":
        _, message, param, code = answer
        raise InvalidRequestError(message, param=param, code=code)
    _, model, stream, body = answer
    return InferenceRequest(operation, model, stream, body, raw)


async def parse_request_async(
    operation: Operation, raw: bytes, *, inline_limit: int | None = None, offload: ParseOffload | None = None,
) -> InferenceRequest:
    """``parse_request`` that keeps the loop free for a body over ``inline_limit`` bytes.

    ``offload``: the app's :class:`ParseOffload`; without one the body is always parsed inline.
    ``inline_limit``: bytes (None: ``offload.inline_limit``); a body of at most that many bytes is
    parsed inline. Returns exactly what ``parse_request`` returns; raises exactly what it raises
    (``InvalidRequestError``).
    """
    if offload is None:
        return parse_request(operation, raw)
    limit = offload.inline_limit if inline_limit is None else inline_limit
    if len(raw) <= limit:
        return parse_request(operation, raw)
    return await offload.parse(operation, raw)


def serve(stdin: Any = None, stdout: Any = None) -> None:
    """The worker process's loop: read a frame (operation, length, body) from ``stdin``, write
    ``length + pickle(parse_remote(...))`` to ``stdout``; return at end of input."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    while True:
        header = stdin.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return
        target, size = _HEADER.unpack(header)
        raw = stdin.read(size)
        if len(raw) < size:
            return
        answer = pickle.dumps(parse_remote(_TARGETS[target], raw), protocol=5)
        stdout.write(_HEADER.pack(0, len(answer)))
        stdout.write(answer)
        stdout.flush()


if __name__ == "__main__":
    serve()
