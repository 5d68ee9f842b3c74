"""Issue 17, item 8: TPM limits and budgets hold under 50 concurrent requests, in memory and in Redis.

Before the fix admission counted only the prompt estimate against TPM and nothing against the
budget until answers came back, so 50 requests sent at once were all admitted (TPM 3,000: 3.5x
used; budget $0.05: 211x spent in memory, 8x in Redis). Now each request reserves its prompt
estimate plus ``max_tokens`` (tokens) and that priced at the cluster (cost) at admission, and
settles on the actual usage. The upstream here charges exactly what a request may use: 20 prompt
tokens and ``max_tokens`` output tokens, after a pause that keeps all 50 in flight together.

The bound asserted is the documented one (``gateway/keys/limits.py``): with ``max_tokens`` set
and the prompt estimate (body bytes / 4) above the real prompt, used <= limit.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from aiohttp import web

from tests.support.gateway import RunningGateway
from tests.support.ops import REDIS_URL, drop_prefix, redis_prefix
from tests.support.security_keys import ADMIN_KEY, NEVER_EJECT, admin_headers, serve
from tests.support.threads import ServerThread, wait_until

PROMPT_TOKENS = 20
MAX_TOKENS = 200
CONCURRENT = 50
PRICE = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}  # one request: $0.00042
TPM_KEY = "sk-security-tpm-0123456789"
BUDGET_KEY = "sk-security-budget-0123456789"
TPM = 3000
BUDGET_USD = 0.005


class MeteredUpstream:
    """An OpenAI chat endpoint whose usage is 20 prompt tokens plus ``max_tokens`` output tokens."""

    def __init__(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self.thread = ServerThread.aiohttp(app)

    async def _chat(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        await asyncio.sleep(0.3)  # keeps the burst in flight together (the assertions hold either way)
        output = int(body.get("max_tokens") or 1)
        usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": output, "total_tokens": PROMPT_TOKENS + output}
        message = {"role": "assistant", "content": "ok"}
        return web.json_response({
            "id": "chatcmpl-metered", "object": "chat.completion", "created": 1, "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": "length"}], "usage": usage,
        })

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.thread.port}/v1"


@pytest.fixture(scope="module")
def upstream() -> Iterator[MeteredUpstream]:
    metered = MeteredUpstream()
    metered.thread.start()
    yield metered
    metered.thread.stop()


@pytest.fixture(params=["memory", "redis"])
def gateway(request: pytest.FixtureRequest, upstream: MeteredUpstream) -> Iterator[RunningGateway]:
    state: dict[str, Any] = {"backend": "memory"}
    prefix = redis_prefix()
    if request.param == "redis":
        state = {"backend": "redis", "redis_url": REDIS_URL, "key_prefix": prefix}
    config = {
        "admin": {"api_key": ADMIN_KEY},
        "auth": {"keys": [
            {"name": "tpm", "key": TPM_KEY, "tpm": TPM},
            {"name": "budget", "key": BUDGET_KEY, "budget_usd": BUDGET_USD, "budget_period": "day"},
        ]},
        "quotas": {"store_timeout_s": 2.0},
        "state": state,
        **NEVER_EJECT,
        "clusters": {"metered": {"price": PRICE, "endpoints": [{"name": "metered-0", "url": upstream.base_url, "model": "m"}]}},
        "models": {"m": {"cluster": "metered"}},
    }
    with serve(config, health_checks=False) as running:
        yield running
    drop_prefix(prefix)


async def _burst(gateway: RunningGateway, key: str) -> tuple[list[Any], int]:
    """50 chat requests at once through the SDK: (the completions served, how many got 429)."""
    async with openai.AsyncOpenAI(base_url=gateway.base_url, api_key=key, max_retries=0, timeout=60) as client:

        async def one(index: int) -> Any:
            try:
                return await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"question {index}"}], max_tokens=MAX_TOKENS
                )
            except openai.RateLimitError:
                return None

        answers = await asyncio.gather(*(one(index) for index in range(CONCURRENT)))
    served = [answer for answer in answers if answer is not None]
    return served, len(answers) - len(served)


def _spent(gateway: RunningGateway, key_id: str) -> float:
    response = httpx.get(gateway.url + f"/admin/keys/{key_id}", headers=admin_headers(), timeout=10)
    return float(response.json()["spent_usd_this_period"])


def _settled(gateway: RunningGateway) -> bool:
    return gateway.app.state.container.ops.gate.queued == 0


def test_tokens_per_minute_hold_under_a_concurrent_burst(gateway: RunningGateway) -> None:
    served, refused = asyncio.run(_burst(gateway, TPM_KEY))
    used = sum(answer.usage.total_tokens for answer in served)
    print(f"\nTPM {TPM}: {len(served)} admitted, {refused} refused, {used} tokens used")
    assert served and refused
    assert used <= TPM  # before the fix: all 50 admitted, 11,000 tokens


def test_a_budget_holds_under_a_concurrent_burst_and_settles_to_the_actual_spend(gateway: RunningGateway) -> None:
    served, refused = asyncio.run(_burst(gateway, BUDGET_KEY))
    cost = sum(a.usage.prompt_tokens * PRICE["input_per_mtok"] + a.usage.completion_tokens * PRICE["output_per_mtok"] for a in served) / 1e6
    print(f"\nbudget ${BUDGET_USD}: {len(served)} admitted, {refused} refused, ${cost:.5f} spent")
    assert served and refused
    assert cost <= BUDGET_USD  # before the fix: all 50 admitted, $0.021
    assert wait_until(lambda: _settled(gateway))
    assert wait_until(lambda: _spent(gateway, "cfg-budget") == pytest.approx(cost))  # no reservation left behind
