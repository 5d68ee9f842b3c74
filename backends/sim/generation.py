"""The simulated worker's generation endpoints: ``/v1/chat/completions`` and ``/v1/completions``.

One request goes through a short script:

1. parse the body (a 400 as vLLM words it when it is not JSON), pick its fault
   (:mod:`backends.sim.faults`) and play the faults that strike before the status line;
2. check the model name (404) and the lengths (400: ``max_tokens`` over ``max_model_len``, prompt
   over the context) exactly as vLLM 0.32 does;
3. tokenize (chat template or plain prompt) and submit to the :class:`~backends.sim.engine.SimEngine`;
4. relay the output: as SSE (headers go out with the first token, as vLLM's generator yields its
   first chunk only once the engine has produced a token) or as one JSON body. Faults that strike
   after N tokens are played here. If the client leaves, the handler is cancelled and the engine
   request aborted, releasing its KV blocks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from backends.sim import responses
from backends.sim.engine import GenerationHandle, PromptTooLong
from backends.sim.faults import FAULT_HEADER, Fault, FaultSpecError
from backends.sim.responses import ChunkWriter, error_body

if TYPE_CHECKING:
    from backends.sim.worker import SimWorker


_AFTER_N = frozenset({"hang-after", "drop-after", "stream-error", "malformed-sse"})
"""Faults that strike after N tokens (nothing happens if the output is shorter)."""


class RequestError(Exception):
    """A request vLLM would refuse: carries the HTTP status and the error body."""

    def __init__(self, status: int, message: str, error_type: str, param: str | None) -> None:
        super().__init__(message)
        self.status = status
        self.body = error_body(message, error_type, status, param)


def json_response(body: Mapping[str, Any], status: int = 200,
                  headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(body=orjson.dumps(body), status=status, headers=headers,
                        content_type="application/json")


@dataclass(frozen=True)
class Job:
    """A validated generation request."""

    chat: bool
    prompt: list[int]
    max_tokens: int | None
    stream: bool
    include_usage: bool
    cache_salt: str | None


async def handle_generation(worker: SimWorker, request: web.Request, *, chat: bool) -> web.StreamResponse:
    """Serve one chat or text completion request (see the module docstring)."""
    worker.in_flight += 1
    try:
        try:
            body = await read_json(request)
            fault = worker.injector.pick(request.headers.get(FAULT_HEADER))
        except RequestError as exc:
            return json_response(exc.body, exc.status)
        except FaultSpecError as exc:
            return json_response(error_body(str(exc), "BadRequestError", 400, FAULT_HEADER), 400)
        early = await pre_header_fault(worker, fault)
        if early is not None:
            return early
        try:
            job = _validate(worker, body, chat)
            handle = await worker.engine.submit(job.prompt, job.max_tokens, job.cache_salt)
        except RequestError as exc:
            return json_response(exc.body, exc.status)
        except PromptTooLong as exc:
            return json_response(error_body(str(exc), "BadRequestError", 400, "input_tokens"), 400)
        try:
            if job.stream:
                return await _stream(worker, request, job, handle, fault)
            return await _complete(worker, request, job, handle, fault)
        finally:
            worker.engine.abort(handle)
    finally:
        worker.in_flight -= 1


async def read_json(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError(400, f"JSON decode error: {exc}", "Bad Request", "body") from None
    if not isinstance(body, dict):
        raise RequestError(400, "request body must be a JSON object", "Bad Request", "body")
    return body


async def pre_header_fault(worker: SimWorker, fault: Fault | None) -> web.Response | None:
    if fault is None:
        return None
    if fault.kind == "error":
        kind = "InternalServerError" if fault.status >= 500 else "BadRequestError"
        return json_response(error_body(fault.message, kind, fault.status), fault.status)
    if fault.kind == "rate-limit":
        return json_response(
            error_body(fault.message, "RateLimitError", 429), 429,
            headers={"Retry-After": f"{fault.retry_after:g}"},
        )
    if fault.kind == "hang-before-headers":
        await _hang(worker, fault)
        return json_response(error_body(fault.message, "InternalServerError", 500), 500)
    return None


async def _hang(worker: SimWorker, fault: Fault) -> None:
    """Stall for ``fault.seconds``, or until the client leaves (the handler is cancelled)."""
    if fault.seconds is not None:
        await worker.clock.sleep(fault.seconds)
    else:
        await asyncio.get_running_loop().create_future()


def _validate(worker: SimWorker, body: dict[str, Any], chat: bool) -> Job:
    model = body.get("model")
    if model is not None and model != worker.config.model:
        raise RequestError(
            404, f"The model `{model}` does not exist. Valid aliases: {worker.config.model}.",
            "NotFoundError", "model",
        )
    if body.get("n", 1) not in (1, None):
        raise RequestError(400, "n > 1 is not supported by the kvgate simulator",
                           "BadRequestError", "n")
    prompt = _prompt_tokens(worker, body, chat)
    max_len = worker.config.preset.max_model_len
    raw_max = body.get("max_completion_tokens") if chat else None
    max_tokens = raw_max if raw_max is not None else body.get("max_tokens", None if chat else 16)
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise RequestError(400, f"max_tokens must be at least 1, got {max_tokens}.",
                           "BadRequestError", "max_tokens")
    if max_tokens is not None and max_tokens > max_len:
        raise RequestError(
            400, f"max_tokens={max_tokens} cannot be greater than max_model_len={max_len}. Please "
            f"request fewer output tokens. (parameter=max_tokens, value={max_tokens})",
            "BadRequestError", "max_tokens",
        )
    if len(prompt) >= max_len:
        raise RequestError(
            400, f"This model's maximum context length is {max_len} tokens. However, your prompt "
            f"contains at least {len(prompt)} input tokens, which exceeds this limit even "
            f"without any output tokens. Please reduce the length of the input prompt. "
            f"(parameter=input_tokens, value={len(prompt)})",
            "BadRequestError", "input_tokens",
        )
    options = body.get("stream_options") or {}
    return Job(
        chat=chat,
        prompt=prompt,
        max_tokens=max_tokens,
        stream=bool(body.get("stream")),
        include_usage=bool(options.get("include_usage")),
        cache_salt=body.get("cache_salt"),
    )


def check_messages(messages: Any) -> list[dict[str, Any]]:
    """``messages`` if vLLM's request model would accept its shape, else RequestError (400).

    vLLM validates each message with pydantic before templating: ``role`` a string, ``content``
    a string, null, or a list of content-part objects whose ``text`` (when present) is a string.
    Anything else is a 400 ``Bad Request`` with pydantic's message (never a 500).
    """
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise RequestError(400, "messages must be a list of objects", "BadRequestError",
                           "messages")
    for index, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str):
            raise _validation_error(index, "role", "string_type", "Input should be a valid string", role)
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise _validation_error(index, "content", "string_type", "Input should be a valid string", content)
        for part in content:
            if not isinstance(part, dict) or not isinstance(part.get("text", ""), str):
                raise _validation_error(index, "content", "model_type",
                                        "Input should be a valid content part object", part)
    return messages


def _validation_error(index: int, field: str, kind: str, msg: str, value: Any) -> RequestError:
    loc = ("body", "messages", index, field)
    detail = {"type": kind, "loc": loc, "msg": msg, "input": value}
    return RequestError(400, f"1 validation error:\n  {detail}", "Bad Request", f"messages.{index}.{field}")


def _prompt_tokens(worker: SimWorker, body: dict[str, Any], chat: bool) -> list[int]:
    if chat:
        return worker.tokenizer.apply_chat_template(check_messages(body.get("messages")))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if isinstance(prompt, str):
        return worker.tokenizer.encode(prompt)
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return list(prompt)
    raise RequestError(400, "prompt must be a string, one string or a list of token ids",
                       "BadRequestError", "prompt")


def _usage(job: Job, handle: GenerationHandle, worker: SimWorker) -> dict[str, Any]:
    reasoning = handle.output.reasoning_tokens if worker.config.output.reasoning_fraction else None
    created = handle.request.created_blocks * worker.config.preset.block_size
    return responses.usage(
        handle.prompt_tokens, handle.emitted, handle.cached_tokens, created,
        chat=job.chat, stream=job.stream, reasoning=reasoning,
    )


async def _complete(worker: SimWorker, request: web.Request, job: Job, handle: GenerationHandle,
                    fault: Fault | None) -> web.StreamResponse:
    target = fault.tokens if fault is not None and fault.kind in _AFTER_N else None
    while not handle.done and (target is None or handle.emitted < target):
        await handle.wait(handle.emitted)
    if fault is not None and (target is None or handle.emitted >= target):
        early = await _play_unary_fault(worker, request, fault)
        if early is not None:
            return early
    while not handle.done:
        await handle.wait(handle.emitted)
    rid = worker.new_id("chatcmpl" if job.chat else "cmpl")
    created = int(worker.clock.wall())
    pieces = handle.output.pieces[: handle.emitted]
    reasoning_count = min(handle.output.reasoning_tokens, len(pieces))
    finish = handle.finish_reason or "stop"
    if job.chat:
        body = responses.chat_completion(
            rid, created, worker.config.model, worker.fingerprint,
            content="".join(pieces[reasoning_count:]),
            reasoning="".join(pieces[:reasoning_count]) if reasoning_count else None,
            finish_reason=finish, usage_body=_usage(job, handle, worker),
        )
    else:
        body = responses.text_completion(
            rid, created, worker.config.model, worker.fingerprint, text="".join(pieces),
            finish_reason=finish, usage_body=_usage(job, handle, worker),
        )
    return json_response(body)


async def _play_unary_fault(worker: SimWorker, request: web.Request,
                            fault: Fault) -> web.StreamResponse | None:
    """A stream fault on a non-streamed request; returns the response that ends it, if any."""
    if fault.kind == "slow-first-token" and fault.seconds:
        await worker.clock.sleep(fault.seconds)
    elif fault.kind == "hang-after":
        await _hang(worker, fault)
    elif fault.kind == "drop-after":
        _drop(request)
        return web.Response(status=500)
    elif fault.kind == "stream-error":
        return json_response(error_body(fault.message, "InternalServerError", fault.status),
                             fault.status)
    elif fault.kind == "malformed-sse":
        return web.Response(body=b'{"id": "broken", "choices": [', status=200,
                            content_type="application/json")
    return None


def _drop(request: web.Request) -> None:
    """Cut the TCP connection without a response (RST where the platform allows)."""
    transport = request.transport
    if transport is not None:
        transport.abort()


async def _stream(worker: SimWorker, request: web.Request, job: Job, handle: GenerationHandle,
                  fault: Fault | None) -> web.StreamResponse:
    writer = ChunkWriter(worker.new_id("chatcmpl" if job.chat else "cmpl"),
                         int(worker.clock.wall()), worker.config.model, worker.fingerprint,
                         chat=job.chat)
    relay = _StreamRelay(worker, request, job, handle, fault, writer)
    return await relay.run()


class _StreamRelay:
    """Copies a handle's tokens to an SSE response, playing after-N-tokens faults."""

    def __init__(self, worker: SimWorker, request: web.Request, job: Job,
                 handle: GenerationHandle, fault: Fault | None, writer: ChunkWriter) -> None:
        self.worker, self.request, self.job = worker, request, job
        self.handle, self.fault, self.writer = handle, fault, writer
        self.response = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream; charset=utf-8"})

    async def run(self) -> web.StreamResponse:
        handle, fault = self.handle, self.fault
        await handle.wait(0)
        if fault is not None and fault.kind == "slow-first-token" and fault.seconds:
            await self.worker.clock.sleep(fault.seconds)
        await self.response.prepare(self.request)
        fault_at = fault.tokens if fault is not None and fault.kind in _AFTER_N else None
        pending = [self.writer.role()]
        sent = 0
        while True:
            upto = handle.emitted if fault_at is None else min(handle.emitted, fault_at)
            pending.extend(self._token_chunk(i) for i in range(sent, upto))
            sent = upto
            if fault_at is not None and sent == fault_at:
                fault_at = None
                if await self._play_fault(pending):
                    return self.response
                pending = []
                continue
            if pending:
                await self.response.write(b"".join(pending))
                pending = []
            if handle.done and sent >= handle.emitted:
                break
            await handle.wait(sent)
        if self.job.include_usage:
            pending.append(self.writer.usage(_usage(self.job, handle, self.worker)))
        pending.append(responses.SSE_DONE)
        await self.response.write(b"".join(pending))
        await self.response.write_eof()
        return self.response

    def _token_chunk(self, index: int) -> bytes:
        output = self.handle.output
        last = index == output.num_tokens - 1
        return self.writer.token(
            output.pieces[index],
            reasoning=index < output.reasoning_tokens,
            finish_reason=output.finish_reason if last else None,
            fingerprint=last and not self.job.include_usage,
        )

    async def _play_fault(self, pending: list[bytes]) -> bool:
        """Play the stream fault after ``pending`` is written; True if the stream is over."""
        fault = self.fault
        assert fault is not None
        if fault.kind == "stream-error":
            body = error_body(fault.message, "InternalServerError", fault.status)
            pending += [responses.sse(body), responses.SSE_DONE]
        elif fault.kind == "malformed-sse":
            pending.append(b'data: {"id": "broken", "choices": [{"index": 0, "delta": \n\n')
        await self.response.write(b"".join(pending))
        if fault.kind == "stream-error":
            await self.response.write_eof()
            return True
        if fault.kind == "drop-after":
            _drop(self.request)
            return True
        if fault.kind == "hang-after":
            await _hang(self.worker, fault)
        return False
