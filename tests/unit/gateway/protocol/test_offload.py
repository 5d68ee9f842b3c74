"""parse_request_async: the same request, or the same error, as the inline parse_request, off the loop or not."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.errors import InvalidRequestError
from gateway.protocol.offload import ParseOffload, parse_remote, parse_request_async
from gateway.protocol.openai import InferenceRequest, Operation, parse_request
from gateway.protocol.validation import brackets_reach

BODIES = [
    b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}',
    b'{"model":"m","prompt":"hi","max_tokens":3}',
    b"not json",
    b"[1,2]",
    b'{"messages":[]}',
    b'{"model":"m","messages":[]}',
    b'{"model":"m","messages":[{"content":"x"}]}',
    b'{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":0}',
    b'{"model":"m","messages":[{"role":"user","content":"x"}],"stream":"yes"}',
    b'{"model":"m","prompt":[-1]}',
    b'{"model":"m","messages":[{"role":"user","content":"x"}],"x":' + b"[" * 200 + b"]" * 200 + b"}",
]


def outcome(work: Any) -> tuple[str, Any]:
    try:
        request = work()
    except InvalidRequestError as error:
        return "error", (type(error), error.status, error.message, error.param, error.code, error.body())
    assert isinstance(request, InferenceRequest)
    return "ok", (request.operation, request.model, request.stream, request.body, request.raw)


async def outcome_async(coro: Any) -> tuple[str, Any]:
    try:
        request = await coro
    except InvalidRequestError as error:
        return "error", (type(error), error.status, error.message, error.param, error.code, error.body())
    return "ok", (request.operation, request.model, request.stream, request.body, request.raw)


@pytest.mark.parametrize("operation", list(Operation))
@pytest.mark.parametrize("raw", BODIES)
def test_the_worker_half_gives_the_inline_answer(operation: Operation, raw: bytes) -> None:
    from gateway.protocol.offload import _request_of

    assert outcome(lambda: _request_of(operation, raw, parse_remote(operation.value, raw))) == outcome(
        lambda: parse_request(operation, raw))


@pytest.mark.parametrize("operation", list(Operation))
def test_off_the_loop_equals_inline(operation: Operation) -> None:
    async def every_body() -> list[tuple[Any, Any]]:
        offload = ParseOffload(inline_limit=0)
        await offload.start()
        try:
            return [(await outcome_async(parse_request_async(operation, raw, offload=offload)),
                     await outcome_async(parse_request_async(operation, raw, inline_limit=len(raw), offload=offload)))
                    for raw in BODIES]
        finally:
            await offload.aclose()

    for raw, (remote, inline) in zip(BODIES, asyncio.run(every_body())):
        assert remote == inline == outcome(lambda raw=raw: parse_request(operation, raw))


def test_without_an_offload_the_body_is_parsed_inline() -> None:
    raw = BODIES[0]
    got = asyncio.run(outcome_async(parse_request_async(Operation.CHAT, raw, inline_limit=0)))
    assert got == outcome(lambda: parse_request(Operation.CHAT, raw))


def test_a_dead_worker_falls_back_to_the_inline_parse_and_is_replaced() -> None:
    async def run() -> tuple[InferenceRequest, InferenceRequest]:
        pool = ParseOffload(inline_limit=0)
        await pool.start()
        worker = pool._pool[0]
        assert worker is not None
        worker.process.kill()
        await worker.process.wait()
        try:
            first = await pool.parse(Operation.CHAT, BODIES[0])
            second = await pool.parse(Operation.CHAT, BODIES[0])
            assert pool._pool[0] is not None and pool._pool[0] is not worker
        finally:
            await pool.aclose()
        return first, second

    first, second = asyncio.run(run())
    assert first.body == second.body == orjson.loads(BODIES[0])


def test_large_bodies_round_trip_in_chunks() -> None:
    raw = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "z" * (3 * 1024 * 1024 + 7)}]})

    async def run() -> InferenceRequest:
        pool = ParseOffload(inline_limit=1024, workers=2)
        await pool.start()
        try:
            return (await asyncio.gather(*(parse_request_async(Operation.CHAT, raw, offload=pool) for _ in range(3))))[2]
        finally:
            await pool.aclose()

    assert asyncio.run(run()).body == orjson.loads(raw)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["model", "messages", "prompt", "stream", "role",
                                                                                  "content", "max_tokens", "n", "x"]), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=JSON, operation=st.sampled_from(list(Operation)))
def test_any_json_gives_the_inline_answer(value: Any, operation: Operation) -> None:
    from gateway.protocol.offload import _request_of

    raw = orjson.dumps(value)
    assert outcome(lambda: _request_of(operation, raw, parse_remote(operation.value, raw))) == outcome(
        lambda: parse_request(operation, raw))


@settings(max_examples=300, deadline=None)
@given(raw=st.binary(max_size=200) | st.text(alphabet="[{}]a\"", max_size=300).map(str.encode), wanted=st.integers(1, 40))
def test_brackets_reach_counts_like_bytes_count(raw: bytes, wanted: int) -> None:
    assert brackets_reach(raw, wanted) == (raw.count(b"[") + raw.count(b"{") >= wanted)


def test_a_cancelled_parse_retires_its_worker_and_the_next_one_works() -> None:
    raw = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "c" * (16 * 1024 * 1024)}]})

    async def run() -> InferenceRequest:
        pool = ParseOffload(inline_limit=0)
        await pool.start()
        first = pool._pool[0]
        try:
            task = asyncio.ensure_future(pool.parse(Operation.CHAT, raw))
            await asyncio.sleep(0.005)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert first is not None and pool._pool[0] is None  # retired: half a frame may be in its pipe
            await first.process.wait()
            return await pool.parse(Operation.CHAT, BODIES[0])
        finally:
            await asyncio.sleep(0.05)
            await pool.aclose()

    assert asyncio.run(run()).body == orjson.loads(BODIES[0])


API_BODIES = {
    "responses": [b'{"model":"m","input":"hi","instructions":"Be brief.","stream":true}',
                  b'{"model":"m","input":[{"role":"user","content":"x"}],"previous_response_id":"resp_1"}',
                  b'{"model":"m"}', b"not json"],
    "messages": [b'{"model":"m","max_tokens":3,"system":"s","messages":[{"role":"user","content":"hi"}]}',
                 b'{"model":"m","messages":"x"}'],
    "messages.count_tokens": [b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'],
    "embeddings": [b'{"model":"e","input":["a","b"]}', b'{"model":"e","input":"x","dimensions":"3"}'],
    "rerank": [b'{"model":"e","query":"q","documents":["a"]}'],
    "score": [b'{"model":"e","text_1":"a","text_2":"b"}'],
}


def _api_outcome(work: Any) -> tuple[str, Any]:
    try:
        return "ok", work()
    except InvalidRequestError as error:
        return "error", (type(error), error.status, error.message, error.param, error.code)


def test_every_body_api_is_offloaded_with_the_inline_answer() -> None:
    """The other APIs' bodies parsed in a worker: the same ApiRequest (raw and prompt.raw put back) or error."""
    from gateway.protocol.apis import BY_NAME
    from gateway.protocol.offload import BODY_APIS

    assert sorted(BODY_APIS) == sorted(API_BODIES)

    async def every_body() -> list[tuple[str, bytes, tuple[str, Any]]]:
        offload = ParseOffload(inline_limit=0)
        await offload.start()
        out = []
        try:
            for api, bodies in API_BODIES.items():
                for raw in bodies:
                    try:
                        out.append((api, raw, ("ok", await offload.parse_api(api, raw))))
                    except InvalidRequestError as error:
                        out.append((api, raw, ("error", (type(error), error.status, error.message, error.param, error.code))))
        finally:
            await offload.aclose()
        return out

    for api, raw, remote in asyncio.run(every_body()):
        assert remote == _api_outcome(lambda api=api, raw=raw: BY_NAME[api].parse(raw, None)), (api, raw)
        if remote[0] == "ok":
            assert remote[1].raw is raw and (remote[1].prompt is None or remote[1].prompt.raw is raw)
