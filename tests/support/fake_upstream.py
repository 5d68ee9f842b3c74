"""A scripted OpenAI-compatible upstream on real loopback HTTP (aiohttp), for integration tests.

kvgate forwards no client header to an endpoint, so a request picks its behaviour with the
``fake`` field of its JSON body, which kvgate passes through untouched (the SDK sends it with
``extra_body={"fake": "..."}``). A fake built with ``FakeUpstream(name, script=...)`` ignores that
field and always plays its own script (one broken endpoint next to a good one).

Scripts:
    ok (default)   non-streaming: a completion whose content is ``echo from <name>``, with the raw
                   request body under ``echo`` (tests compare bytes), ``reasoning_content`` and an
                   unknown extra ``kv_transfer_params``. Streaming: a role chunk, three content
                   chunks, a finish chunk, a usage chunk if ``stream_options.include_usage``, and
                   ``[DONE]``. ``/v1/completions`` answers in the ``text_completion`` format.
    rich           like ok, non-streaming, with a tool call, token logprobs and a non-null
                   ``kv_transfer_params`` (chat only).
    status:NNN     answer HTTP NNN with an OpenAI-shaped error body, message ``fake upstream says
                   NNN`` (429 adds ``Retry-After: 7``). ``status:NNN:text`` sends that message as
                   plain text, ``status:NNN:flat`` as ``{"object": "error", "message": ...}`` (the
                   error shape of older vLLM and SGLang servers), ``status:NNN:fastapi`` as FastAPI's
                   validation error (``{"detail": [{"loc": ["body", "temperature"], "msg": ...}]}``).
    inband_error   stream: a role chunk, then one write holding a content chunk, ``data: {"error":
                   ...}`` and ``[DONE]``; status 200.
    first_error    stream: ``data: {"error": ...}`` as the very first event, status 200.
    truncate       stream: two content chunks, then the connection closes without ``[DONE]``.
    hang           wait forever before the response headers.
    stall          send the 200 headers, then wait forever before the first byte of the body.
    hang_stream    stream: send the first content chunk, then wait forever.
    empty_stream   status 200 text/event-stream with an empty body.
    slow_stream    stream (chat): a role chunk, ten content chunks 0.2 s apart, a finish chunk and
                   ``[DONE]`` (about 2 s: streams in flight while a test stops the gateway).

Every request seen is recorded in ``FakeUpstream.requests`` (headers with lower-case names, raw
body, parsed body);
``active`` counts the requests still being handled and ``cancelled`` those whose handler was
cancelled because the caller (kvgate) dropped the connection. The counters are written on the
fake's own thread; tests poll them with :func:`tests.support.threads.wait_until`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

from tests.support.threads import ServerThread

USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10, "prompt_tokens_details": {"cached_tokens": 4}}
WORDS = ("Hello", " from")

TOOL_CALL = {
    "id": "call_fake_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
LOGPROBS = {
    "content": [
        {"token": "echo", "logprob": -0.25, "bytes": [101, 99, 104, 111], "top_logprobs": [{"token": "echo", "logprob": -0.25, "bytes": [101, 99, 104, 111]}]}
    ]
}
KV_TRANSFER_PARAMS = {"do_remote_prefill": True, "remote_block_ids": [1, 2, 3], "remote_engine_id": "fake-engine"}


def _event(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _chat_chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    return _event(
        {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
        }
    )


def _text_chunk(model: str, text: str, finish: str | None = None) -> bytes:
    return _event(
        {
            "id": "cmpl-fake",
            "object": "text_completion",
            "created": 1,
            "model": model,
            "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}],
        }
    )


def _usage_chunk(model: str, text: bool) -> bytes:
    return _event(
        {
            "id": "cmpl-fake" if text else "chatcmpl-fake",
            "object": "text_completion" if text else "chat.completion.chunk",
            "created": 1,
            "model": model,
            "choices": [],
            "usage": USAGE,
        }
    )


INBAND_ERROR = b'data: {"error": {"message": "EngineCore died", "type": "InternalServerError", "param": null, "code": 500}}\n\n'
FIRST_ERROR = b'data: {"error": {"message": "engine dead", "type": "InternalServerError", "code": 500}}\n\n'


class FakeUpstream:
    """One scripted endpoint. ``start()`` serves it on a free loopback port in its own thread."""

    def __init__(self, name: str = "fake", *, script: str | None = None) -> None:
        self.name = name
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.active = 0
        self.cancelled = 0
        self.thread: ServerThread | None = None

    @property
    def base_url(self) -> str:
        assert self.thread is not None
        return f"http://127.0.0.1:{self.thread.port}/v1"

    @property
    def last(self) -> dict[str, Any]:
        """The most recent request: ``{"headers", "raw", "body"}``."""
        return self.requests[-1]

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completion)
        app.router.add_get("/health", self._health)
        return app

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _completion(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, text=True)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, text=False)

    async def _handle(self, request: web.Request, text: bool) -> web.StreamResponse:
        raw = await request.read()
        body = orjson.loads(raw)
        headers = {name.lower(): value for name, value in request.headers.items()}
        self.requests.append({"headers": headers, "raw": raw, "body": body})
        script = self.script or str(body.get("fake", "ok"))
        self.active += 1
        try:
            return await self._run(request, body, raw, script, text)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.active -= 1

    async def _run(self, request: web.Request, body: dict[str, Any], raw: bytes, script: str, text: bool) -> web.StreamResponse:
        if script.startswith("status:"):
            return self._error(script)
        if script == "hang":
            await asyncio.sleep(3600)
        model = body["model"]
        if script == "stall" and not body.get("stream"):
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            await response.prepare(request)
            await asyncio.sleep(3600)
        if not body.get("stream"):
            return web.json_response(self._completion_body(raw, model, text, rich=script == "rich"))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)  # StreamResponse sends its headers here
        if script == "empty_stream":
            return response
        if script == "stall":
            await asyncio.sleep(3600)
        if script == "slow_stream":  # a role chunk, ten words 0.2 s apart, finish, [DONE]: about 2 s
            await response.write(_chat_chunk(model, {"role": "assistant", "content": ""}))
            for index in range(10):
                await asyncio.sleep(0.2)
                await response.write(_chat_chunk(model, {"content": f" w{index}"}))
            await response.write(_chat_chunk(model, {}, finish="stop"))
            await response.write(b"data: [DONE]\n\n")
            return response
        if script == "first_error":
            await response.write(FIRST_ERROR)
            await response.write(b"data: [DONE]\n\n")
            return response
        if not text:
            await response.write(_chat_chunk(model, {"role": "assistant", "content": ""}))
        for word in (*WORDS, " " + self.name):
            content = _text_chunk(model, word) if text else _chat_chunk(model, {"content": word})
            if script == "inband_error":  # in one write, as an engine flushes its last events
                await response.write(content + INBAND_ERROR + b"data: [DONE]\n\n")
                return response
            await response.write(content)
            if script == "truncate" and word == WORDS[-1]:
                assert request.transport is not None
                request.transport.close()
                return response
            if script == "hang_stream":
                await asyncio.sleep(3600)
        await response.write(_text_chunk(model, "", finish="stop") if text else _chat_chunk(model, {}, finish="stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            await response.write(_usage_chunk(model, text))
        await response.write(b"data: [DONE]\n\n")
        return response

    @staticmethod
    def _error(script: str) -> web.Response:
        _, status_text, *style = script.split(":")
        status = int(status_text)
        message = f"fake upstream says {status}"
        headers = {"Retry-After": "7"} if status == 429 else None
        if style == ["text"]:
            return web.Response(text=message, status=status, headers=headers)
        if style == ["fastapi"]:  # a FastAPI server's own request validation (pydantic's errors)
            detail = [{"type": "less_than_equal", "loc": ["body", "temperature"],
                       "msg": "Input should be less than or equal to 2", "input": 5}]
            return web.json_response({"detail": detail}, status=status, headers=headers)
        if style == ["flat"]:  # vLLM's and SGLang's older ErrorResponse
            flat = {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": status}
            return web.json_response(flat, status=status, headers=headers)
        error = {"error": {"message": message, "type": "BadRequestError", "param": None, "code": status}}
        return web.json_response(error, status=status, headers=headers)

    def _completion_body(self, raw: bytes, model: str, text: bool, rich: bool) -> dict[str, Any]:
        content = f"echo from {self.name}"
        choice: dict[str, Any]
        if text:
            choice = {"index": 0, "text": content, "finish_reason": "stop", "logprobs": None}
        else:
            choice = {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": content,
                    "reasoning_content": "thought",
                    "tool_calls": [TOOL_CALL] if rich else [],
                },
                "finish_reason": "tool_calls" if rich else "stop",
                "logprobs": LOGPROBS if rich else None,
            }
        return {
            "id": "cmpl-fake",
            "object": "text_completion" if text else "chat.completion",
            "created": 1,
            "model": model,
            "choices": [choice],
            "usage": USAGE,
            "echo": raw.decode(),
            "kv_transfer_params": KV_TRANSFER_PARAMS if rich else None,
        }

    def start(self) -> FakeUpstream:
        # handler_cancellation: a dropped connection cancels the handler, as in vLLM's server,
        # so tests can see that kvgate aborted the upstream request.
        self.thread = ServerThread.aiohttp(self.app(), handler_cancellation=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.thread is not None:
            self.thread.stop()
