"""The HTTP surface of a simulated worker, route for route as vLLM's OpenAI server (aiohttp).

Routes (vLLM 0.32 names and bodies):

- ``POST /v1/chat/completions``, ``POST /v1/completions``: :mod:`backends.sim.generation`;
- ``POST /v1/responses``, ``GET /v1/responses/{id}``, ``POST /v1/responses/{id}/cancel``,
  ``DELETE`` (405), ``POST /v1/messages``, ``POST /v1/messages/count_tokens`` and, on an
  ``embed`` worker instead of the generation paths, ``POST /v1/embeddings``, ``/v1/score`` and
  ``/v1/rerank``: :mod:`backends.sim.apis`
  (the other task's paths answer vLLM's 404 ``{"detail": "Not Found"}``);
- ``GET /v1/models``, ``GET /health`` (200, empty body), ``GET /version``, ``GET /load``,
  ``POST /tokenize`` (prompt or messages), ``POST /detokenize``, ``GET /metrics``,
  ``POST /reset_prefix_cache``;
- simulator only: ``GET|POST|DELETE /admin/faults`` to list, add (``{"spec": "KIND:..."}``) and
  clear worker-wide faults (see :mod:`backends.sim.faults`).

:func:`serve` runs one or more workers on consecutive ports in the current event loop (aiohttp's
``handler_cancellation`` is on, so a client that leaves cancels its handler and frees its KV
blocks) and returns the runners to clean up.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from backends.sim import apis
from backends.sim.faults import FaultSpecError, parse_fault
from backends.sim.generation import RequestError, check_messages, handle_generation, json_response
from backends.sim.prometheus import render
from backends.sim.responses import VLLM_VERSION, error_body, model_card
from backends.sim.worker import SimWorker

WORKER_KEY = web.AppKey("sim_worker", SimWorker)


def _worker(request: web.Request) -> SimWorker:
    return request.app[WORKER_KEY]


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await handle_generation(_worker(request), request, chat=True)


async def completions(request: web.Request) -> web.StreamResponse:
    return await handle_generation(_worker(request), request, chat=False)


async def models(request: web.Request) -> web.Response:
    worker = _worker(request)
    created = int(worker.clock.wall())
    card = model_card(worker.config.model, worker.config.root, worker.config.preset.max_model_len,
                      created, worker.new_id("modelperm"))
    return json_response({"object": "list", "data": [card]})


async def health(request: web.Request) -> web.Response:
    return web.Response(status=200 if _worker(request).healthy else 503)


async def version(request: web.Request) -> web.Response:
    return json_response({"version": VLLM_VERSION})


async def load(request: web.Request) -> web.Response:
    return json_response({"server_load": _worker(request).in_flight})


async def tokenize(request: web.Request) -> web.Response:
    worker = _worker(request)
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        return json_response(error_body("JSON decode error", "Bad Request", 400, "body"), 400)
    if isinstance(body.get("messages"), list):
        try:
            messages = check_messages(body["messages"])
        except RequestError as error:
            return json_response(error.body, error.status)
        tokens = worker.tokenizer.apply_chat_template(messages)
    else:
        tokens = worker.tokenizer.encode(str(body.get("prompt", "")))
    return json_response({"count": len(tokens), "max_model_len": worker.config.preset.max_model_len,
                          "tokens": tokens, "token_strs": None})


async def detokenize(request: web.Request) -> web.Response:
    worker = _worker(request)
    body = orjson.loads(await request.read())
    return json_response({"prompt": worker.tokenizer.decode(body.get("tokens", []))})


async def metrics(request: web.Request) -> web.Response:
    worker = _worker(request)
    text = render(worker.config.model, worker.engine.gauges(), worker.metrics, worker.cache_info())
    return web.Response(text=text, content_type="text/plain", charset="utf-8")


async def reset_prefix_cache(request: web.Request) -> web.Response:
    ok = _worker(request).engine.cache.reset()
    return web.Response(status=200 if ok else 409)


async def faults_list(request: web.Request) -> web.Response:
    return json_response({"faults": [f.spec for f in _worker(request).injector.rules]})


async def faults_add(request: web.Request) -> web.Response:
    worker = _worker(request)
    try:
        body = orjson.loads(await request.read())
        worker.add_fault(parse_fault(str(body["spec"])))
    except (orjson.JSONDecodeError, KeyError, TypeError, FaultSpecError) as exc:
        return json_response(error_body(f"bad fault: {exc}", "BadRequestError", 400, "spec"), 400)
    return await faults_list(request)


async def faults_clear(request: web.Request) -> web.Response:
    _worker(request).clear_faults()
    return await faults_list(request)


def build_app(worker: SimWorker) -> web.Application:
    """The aiohttp application of one worker (its lifecycle starts and stops the engine)."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[WORKER_KEY] = worker

    async def lifecycle(_: web.Application):  # type: ignore[no-untyped-def]
        await worker.start()
        yield
        await worker.stop()

    app.cleanup_ctx.append(lifecycle)
    _add_task_routes(app, worker)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/load", load)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/reset_prefix_cache", reset_prefix_cache)
    app.router.add_get("/admin/faults", faults_list)
    app.router.add_post("/admin/faults", faults_add)
    app.router.add_delete("/admin/faults", faults_clear)
    return app


def _bound(handler, worker: SimWorker):  # type: ignore[no-untyped-def]
    async def handle(request: web.Request) -> web.StreamResponse:
        return await handler(request, worker)

    return handle


_GENERATE_POSTS = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
                   "/v1/messages/count_tokens")


def _add_task_routes(app: web.Application, worker: SimWorker) -> None:
    """The inference routes of the worker's task; the other task's paths get vLLM's 404."""
    router = app.router
    if worker.config.task == "embed":
        router.add_post("/v1/embeddings", _bound(apis.create_embeddings, worker))
        router.add_post("/v1/score", _bound(apis.create_score, worker))
        router.add_post("/v1/rerank", _bound(apis.create_rerank, worker))
        for path in _GENERATE_POSTS:
            router.add_post(path, apis.not_found)
        return
    router.add_post("/v1/chat/completions", chat_completions)
    router.add_post("/v1/completions", completions)
    router.add_post("/v1/responses", _bound(apis.create_response, worker))
    router.add_get("/v1/responses/{response_id}", _bound(apis.get_response, worker))
    router.add_post("/v1/responses/{response_id}/cancel", _bound(apis.cancel_response, worker))
    router.add_delete("/v1/responses/{response_id}", _bound(apis.delete_response, worker))
    router.add_post("/v1/messages", _bound(apis.create_message, worker))
    router.add_post("/v1/messages/count_tokens", _bound(apis.count_tokens, worker))
    for path in ("/v1/embeddings", "/v1/score", "/v1/rerank"):
        router.add_post(path, apis.not_found)


async def serve(workers: list[SimWorker], host: str, first_port: int) -> list[web.AppRunner]:
    """Start ``workers`` on ``host`` at ``first_port``, ``first_port + 1``, ...; returns runners."""
    runners: list[web.AppRunner] = []
    try:
        for index, worker in enumerate(workers):
            runner = web.AppRunner(build_app(worker), handler_cancellation=True, access_log=None)
            await runner.setup()
            runners.append(runner)
            await web.TCPSite(runner, host, first_port + index, backlog=4096).start()
    except BaseException:
        for runner in runners:
            await runner.cleanup()
        raise
    return runners

