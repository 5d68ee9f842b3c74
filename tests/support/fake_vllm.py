"""A tiny OpenAI-compatible answerer with vLLM's KV metrics, for ``kvgate kv-check`` tests.

It streams a chat answer word by word (SSE, final usage chunk) and serves ``/metrics`` with a
``vllm:cache_config_info`` line. ``answers`` maps a question to the reply; anything else gets
"I do not know.". Served by ``ServerThread.aiohttp`` on loopback.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from aiohttp import web


def fake_vllm_app(answers: Mapping[str, str], *, cache_dtype: str, kv_tokens: int) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        question = body["messages"][-1]["content"]
        words = answers.get(question, "I do not know.").split(" ")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for i, word in enumerate(words):
            chunk = {"choices": [{"index": 0, "delta": {"content": word if i == 0 else " " + word}}]}
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
        usage = {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": len(words)}}
        await response.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
        await response.write_eof()
        return response

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=(
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
            "# TYPE vllm:cache_config_info gauge\n"
            f'vllm:cache_config_info{{block_size="128",cache_dtype="{cache_dtype}",engine="0",'
            f'kv_cache_size_tokens="{kv_tokens}",num_gpu_blocks="{kv_tokens // 128}"}} 1.0\n'))

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/metrics", metrics)
    return app
