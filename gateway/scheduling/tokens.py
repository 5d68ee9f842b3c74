"""[io] Prompt tokens at routing time: the ``tokenize`` producer of precise mode.

The producer asks one routable endpoint of the cluster (they all serve the same model; the one
with the fewest requests in flight, ties in turn) for the prompt's token ids with vLLM's ``POST /tokenize`` (``{"model", "messages"}`` for a chat request:
the engine's own chat template with ``add_generation_prompt``, as ``/v1/chat/completions``
applies it, ``tools`` and ``chat_template_kwargs`` passed through; ``{"model", "prompt"}`` for a
text completion whose prompt is one string), under the profile's producer deadline
(``routing.producer_deadline_ms``; late or failed = no hint, the scorer falls back). With the
tokens, it reads every candidate's exact match from the KV-event sets
(:meth:`~gateway.scheduling.kv_events.KvBlockSets.match`) into a :class:`PreciseView`
(``Hints.precise``): only endpoints that published events and whose set is complete
(:meth:`~gateway.scheduling.kv_events.KvBlockSets.complete`) get a value. With a single
routable endpoint there is nothing to choose: no round trip.

Why the worker's ``/tokenize`` and not an in-process tokenizer: it is the engine's own template
and tokenizer, so the ids are the ones its blocks were hashed from, and the gateway ships no
model files and no ``tokenizers``/``transformers``/``jinja2``; its cost is one loopback round
trip per request, awaited. ``bench/tokenize_cost.py`` (``docs/routing.md``): 2.4-7.2 ms p50 for
386-3,093 tokens; ``transformers`` in-process is 0.6-3.3 ms p50, but that is CPU on the
gateway's event loop, several times kvgate's whole per-request routing cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from gateway.endpoints.model import Endpoint
from gateway.protocol.openai import Operation
from gateway.scheduling.kv_events import KvBlockSets
from gateway.scheduling.kv_subscriber import origin
from gateway.scheduling.types import Context, Hints

PASSED_THROUGH = ("tools", "chat_template_kwargs", "add_generation_prompt", "continue_final_message")
"""Chat fields that change the rendered prompt and that ``/tokenize`` accepts."""


@dataclass(frozen=True, slots=True)
class PreciseView:
    """The prompt's token ids and, per endpoint that publishes KV events, the tokens it holds.

    Attributes:
        tokens: number of prompt tokens (as the engine counts them).
        matched: endpoint name -> leading prompt tokens its engine holds (whole blocks, capped
            at the last whole block before the final token, which the engine always computes):
            the cached tokens it will report.
    """

    tokens: int
    matched: Mapping[str, int]


def tokenize_body(request_body: Mapping[str, Any], operation: Operation, model: str) -> dict[str, Any] | None:
    """The ``/tokenize`` body for a request, or None when it has no single prompt to tokenize."""
    if operation is Operation.CHAT:
        messages = request_body.get("messages")
        if not isinstance(messages, list):
            return None
        body: dict[str, Any] = {"model": model, "messages": messages}
        body.update((name, request_body[name]) for name in PASSED_THROUGH if name in request_body)
        return body
    prompt = request_body.get("prompt")
    return {"model": model, "prompt": prompt} if isinstance(prompt, str) else None


def held(sets: KvBlockSets, name: str, tokens: Sequence[int]) -> int:
    """Tokens of ``tokens`` the engine ``name`` will report cached (see :class:`PreciseView`)."""
    size = sets.block_size(name)
    if not size:
        return 0
    limit = max(len(tokens) - 1, 0) // size * size
    return min(sets.match(name, tokens, size), limit)


def _in_flight(endpoint: Endpoint) -> float:
    return endpoint.in_flight / endpoint.spec.weight


class TokenizeClient:
    """``await client(url, body, timeout_s) -> token ids``: a small aiohttp session, made on first use."""

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None

    async def __call__(self, url: str, body: Mapping[str, Any], timeout_s: float) -> list[int]:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64))
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        async with self._session.post(url, json=body, timeout=timeout, allow_redirects=False) as reply:
            if reply.status != 200:
                raise aiohttp.ClientResponseError(reply.request_info, (), status=reply.status)
            tokens = (await reply.json())["tokens"]
        if not isinstance(tokens, list):
            raise ValueError("/tokenize: no token list")
        return tokens

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class TokenizeProducer:
    """The ``tokenize`` hint: a :class:`PreciseView` (``Hints.precise``); see the module docstring."""

    def __init__(self, sets: KvBlockSets, client: TokenizeClient, timeout_s: float = 1.0) -> None:
        self._sets = sets
        self._client = client
        self._timeout_s = timeout_s  # the runner's deadline cuts it shorter
        self._turn = 0

    def pick(self, endpoints: Sequence[Endpoint]) -> Endpoint:
        """The endpoint to ask: the fewest requests in flight per unit of weight, ties taken in turn (so the
        ``/tokenize`` calls spread over the cluster instead of all landing on its first worker)."""
        self._turn = turn = (self._turn + 1) % len(endpoints)
        ordered = endpoints[turn:] + endpoints[:turn] if turn else endpoints
        return min(ordered, key=_in_flight)

    def write(self, hints: Hints, value: PreciseView) -> None:
        hints.precise = value

    async def produce(self, ctx: Context, endpoints: Sequence[Endpoint]) -> PreciseView | None:
        sets = self._sets
        if len(endpoints) < 2:
            return None  # nothing to choose between: no round trip (the prediction stays approximate)
        publishing = [e.spec.name for e in endpoints if sets.known(e.spec.name) and sets.complete(e.spec.name)]
        if not publishing:
            return None  # no events yet: nothing to be precise about, no round trip
        spec = self.pick(endpoints).spec
        body = tokenize_body(ctx.request.body, ctx.request.operation, spec.served_model)
        if body is None:
            return None
        tokens = await self._client(origin(spec.base_url) + "/tokenize", body, self._timeout_s)
        return PreciseView(len(tokens), {name: held(sets, name, tokens) for name in publishing})
