"""Issue 17, item 10: one client's bad input cannot open every circuit breaker of a cluster.

Two engines of one cluster both fail with the same 500 on a "poison" input (as an engine that
crashes on a malformed request does). Before the fix each such request was retried on the next
endpoint and counted against both, so five of them opened both breakers (default
``consecutive_failures = 5``) and the cluster answered 503 to everyone for the cooldown. Now a
5xx that repeats the previous endpoint's status and message for the same body stops the attempts
and counts once; and input the gateway can judge (a message ``content`` that is a number) is a
400 at the gateway that never reaches an engine.
"""

from __future__ import annotations

from collections.abc import Iterator

import openai
import orjson
import pytest
from aiohttp import web

from tests.support.gateway import RunningGateway
from tests.support.security_keys import serve
from tests.support.threads import ServerThread

POISON = "\u2620 poison"


class Engine:
    """An OpenAI chat endpoint that answers 500 (always the same message) to any prompt holding POISON."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self.thread = ServerThread.aiohttp(app)

    async def _chat(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.calls += 1
        body = orjson.loads(raw)
        if POISON in raw.decode():
            error = {"message": "EngineCore failed on this request", "type": "InternalServerError", "param": None, "code": 500}
            return web.json_response({"error": error}, status=500)
        usage = {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}
        return web.json_response({
            "id": "chatcmpl-e", "object": "chat.completion", "created": 1, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": self.name}, "finish_reason": "stop"}],
            "usage": usage,
        })

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.thread.port}/v1"


@pytest.fixture
def engines() -> Iterator[list[Engine]]:
    started = [Engine("e0"), Engine("e1")]
    for engine in started:
        engine.thread.start()
    yield started
    for engine in started:
        engine.thread.stop()


@pytest.fixture
def gateway(engines: list[Engine]) -> Iterator[RunningGateway]:
    config = {  # the default breaker: 5 failures in a row open it for 5 s
        "health": {"interval_s": 60},
        "clusters": {"pool": {"endpoints": [
            {"name": engine.name, "url": engine.base_url, "model": "m"} for engine in engines
        ]}},
        "models": {"m": {"cluster": "pool"}},
    }
    with serve(config, health_checks=False) as running:
        yield running


def _ask(client: openai.OpenAI, content: object) -> int:
    try:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": content}])  # type: ignore[typeddict-item]
    except openai.APIStatusError as error:
        return error.status_code
    return 200


def test_repeated_poison_requests_leave_the_cluster_serving(gateway: RunningGateway, engines: list[Engine]) -> None:
    with openai.OpenAI(base_url=gateway.base_url, api_key="sk-unused", max_retries=0) as client:
        statuses = [_ask(client, f"{POISON} {index}") for index in range(6)]
        calls = sum(engine.calls for engine in engines)
        good = [_ask(client, f"fine question {index}") for index in range(4)]
    assert statuses == [502] * 6  # before the fix the sixth was a 503: every breaker of the cluster open
    assert calls <= 2 * 6  # the second endpoint's identical answer ends the attempts
    assert good == [200] * 4
    assert any(gateway.endpoint(engine.name).breaker.allow() for engine in engines)
    counted = gateway.metric("kvgate_upstream_failures_total", reason="http_500")
    repeated = gateway.metric("kvgate_upstream_failures_total", reason="repeated_http_500")
    assert counted == 6 and counted + repeated == calls  # once per request against the breakers


def test_input_the_gateway_can_judge_never_reaches_an_engine(gateway: RunningGateway, engines: list[Engine]) -> None:
    with openai.OpenAI(base_url=gateway.base_url, api_key="sk-unused", max_retries=0) as client:
        statuses = [_ask(client, 5) for _ in range(6)]
        assert _ask(client, "fine") == 200
    assert statuses == [400] * 6
    assert sum(engine.calls for engine in engines) == 1
    assert gateway.metric("kvgate_upstream_failures_total") == 0
