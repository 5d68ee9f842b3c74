"""Responses, Messages and embeddings through kvgate over the simulator, with the official SDKs.

Simulated workers (``backends/sim``, instant preset) run in their own threads; kvgate serves them
on loopback (the raw door: these APIs take the ASGI door inside it). Covered: ``openai``
``responses.create`` (stream and not), ``responses.retrieve``, a three-turn
``previous_response_id`` conversation over two workers (every turn on the worker holding the
chain, also across two kvgate apps sharing Redis), ``embeddings.create`` on a pooling cluster;
``anthropic`` ``messages.create`` (stream and not) and ``count_tokens`` with ``x-api-key``; and
the failure table per API (refused, 5xx, 429, first-event error, break after content, client cancel) with each
API's own error shape.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from backends.sim.clock import LoopClock, ManualClock
from backends.sim.faults import parse_fault
from backends.sim.latency import LatencyModel
from backends.sim.presets import get_preset
from backends.sim.server import build_app
from backends.sim.worker import SimConfig, SimWorker
from tests.integration.conftest import NEVER_EJECT, SHORT_RETRY_WAIT
from tests.support.gateway import RefusingPort, RunningGateway
from tests.support.threads import ServerThread, wait_until

KEY = "sk-kvgate-apis-key"
ADMIN = {"authorization": "Bearer sk-kvgate-apis-admin"}
MODEL = "smollm2"


class Sim:
    """One simulated worker in its own thread (``fault``: a worker-wide fault rule)."""

    def __init__(self, model: str, *, task: str = "generate", fault: str | None = None, step_s: float = 0.0) -> None:
        preset = get_preset("instant")
        if step_s:  # real time: ``step_s`` seconds per engine step (one token per step)
            preset = preset.with_overrides(latency=LatencyModel(step_s, 0.0, 0.0))
        config = SimConfig(model=model, preset=preset, task=task)  # type: ignore[arg-type]
        self.worker = SimWorker(config, LoopClock() if step_s else ManualClock())
        if fault is not None:
            self.worker.injector.add(parse_fault(fault))
        self.thread = ServerThread.aiohttp(build_app(self.worker))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.thread.port}/v1"


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, Sim]]:
    made = {
        "a": Sim(MODEL), "b": Sim(MODEL), "emb": Sim("embedder", task="embed"),
        "bad5": Sim(MODEL, fault="error:status=500"), "bad429": Sim(MODEL, fault="rate-limit:retry_after=0"),
        "first": Sim(MODEL, fault="stream-error:tokens=0"), "drop": Sim(MODEL, fault="drop-after:tokens=2"),
        "slow": Sim(MODEL, step_s=0.05),
    }
    for sim in made.values():
        sim.thread.start()
    yield made
    for sim in made.values():
        sim.thread.stop()


def _config(sims: dict[str, Sim], refusing: RefusingPort, state: dict[str, Any] | None = None) -> dict[str, Any]:
    def ep(name: str, sim: str, model: str = MODEL) -> dict[str, str]:
        return {"name": name, "url": sims[sim].url, "model": model}

    clusters = {
        "gen": {"endpoints": [ep("gen-a", "a"), ep("gen-b", "b")]},
        "emb": {"serves": "pooling", "endpoints": [ep("emb-0", "emb", "embedder")]},
        "c500": {"endpoints": [ep("c500-bad", "bad5"), ep("c500-good", "a")]},
        "c429": {"endpoints": [ep("c429-bad", "bad429"), ep("c429-good", "a")]},
        "cfirst": {"endpoints": [ep("cfirst-bad", "first"), ep("cfirst-good", "a")]},
        "crefused": {"endpoints": [{"name": "crefused-bad", "url": refusing.base_url, "model": MODEL}, ep("crefused-good", "a")]},
        "only500": {"endpoints": [ep("only500-0", "bad5")]},
        "cdrop": {"endpoints": [ep("cdrop-0", "drop")]},
        "cslow": {"endpoints": [ep("cslow-0", "slow")]},
    }
    data: dict[str, Any] = {
        "auth": {"api_keys": [KEY]},
        "admin": {"api_key": ADMIN["authorization"].removeprefix("Bearer ")},
        "upstream": SHORT_RETRY_WAIT,
        "routing": {"policy": "round-robin"},
        **NEVER_EJECT,
        "clusters": clusters,
        "models": {MODEL: {"cluster": "gen"}, "embedder": {"cluster": "emb"}},
    }
    if state is not None:
        data["state"] = state
    return data


@pytest.fixture(scope="module")
def refusing() -> Iterator[RefusingPort]:
    port = RefusingPort()
    yield port
    port.close()


@pytest.fixture(scope="module")
def kvgate(sims: dict[str, Sim], refusing: RefusingPort) -> Iterator[RunningGateway]:
    gateway = RunningGateway(_config(sims, refusing), health_checks=False).start()
    yield gateway
    gateway.stop()


def _openai(gateway: RunningGateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=KEY, max_retries=0, timeout=30)


def _post(gateway: RunningGateway, path: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    sent = {"authorization": f"Bearer {KEY}", **headers}
    return httpx.post(gateway.url + path, json=body, headers=sent, timeout=30)


def test_responses_create_stream_retrieve(kvgate: RunningGateway) -> None:
    with _openai(kvgate) as client:
        _responses(client)


def _responses(client: openai.OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="Say hi", max_output_tokens=6)
    assert first.output_text and first.usage is not None and first.usage.output_tokens == 6
    assert client.responses.retrieve(first.id).id == first.id
    kinds, text = [], []
    with client.responses.create(model=MODEL, input="Stream", max_output_tokens=5, stream=True) as stream:
        for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                text.append(event.delta)
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed" and len(text) == 5
    with pytest.raises(openai.NotFoundError) as missing:  # never stored through kvgate
        client.responses.retrieve("resp_unknown")
    assert missing.value.body["code"] == "response_not_found"  # type: ignore[index]


def _chain(gateways: list[RunningGateway]) -> list[str]:
    """Three turns chained by previous_response_id, turn i through gateways[i % n]; the endpoints."""
    endpoints, previous = [], None
    for turn in range(3):
        gateway = gateways[turn % len(gateways)]
        body: dict[str, Any] = {"model": MODEL, "input": f"turn {turn}", "max_output_tokens": 3}
        if previous is not None:
            body["previous_response_id"] = previous
        reply = _post(gateway, "/v1/responses", body)
        assert reply.status_code == 200, reply.text
        previous = reply.json()["id"]
        endpoints.append(reply.headers["x-kvgate-endpoint"])
    return endpoints


def test_three_turns_stay_on_the_worker_holding_the_chain(kvgate: RunningGateway) -> None:
    starts = []
    for _ in range(2):  # round-robin: the chain starts on each worker once
        endpoints = _chain([kvgate])
        assert len(set(endpoints)) == 1, endpoints
        starts.append(endpoints[0])
    assert sorted(starts) == ["gen-a", "gen-b"]


def test_three_turns_across_two_gateways_sharing_redis(sims: dict[str, Sim], refusing: RefusingPort) -> None:
    state = {"backend": "redis", "redis_url": "redis://127.0.0.1:6379/0", "key_prefix": f"kvgate-apis-{uuid.uuid4().hex[:8]}:"}
    first = RunningGateway(_config(sims, refusing, state), health_checks=False).start()
    second = RunningGateway(_config(sims, refusing, state), health_checks=False).start()
    try:
        starts = []
        for _ in range(2):
            endpoints = _chain([first, second])
            assert len(set(endpoints)) == 1, endpoints
            starts.append(endpoints[0])
        assert sorted(starts) == ["gen-a", "gen-b"]
    finally:
        first.stop()
        second.stop()


def test_stored_response_on_a_down_endpoint_is_a_clear_503(kvgate: RunningGateway) -> None:
    reply = _post(kvgate, "/v1/responses", {"model": MODEL, "input": "x", "max_output_tokens": 2})
    name = reply.headers["x-kvgate-endpoint"]
    endpoint = kvgate.endpoint(name)
    endpoint.draining = True
    try:
        again = _post(kvgate, "/v1/responses", {"model": MODEL, "input": "y", "previous_response_id": reply.json()["id"]})
    finally:
        endpoint.draining = False
    assert again.status_code == 503 and again.json()["error"]["code"] == "stored_response_unavailable"
    assert name in again.json()["error"]["message"]


def test_anthropic_messages(kvgate: RunningGateway) -> None:
    anthropic = pytest.importorskip("anthropic")
    with anthropic.Anthropic(base_url=kvgate.url, api_key=KEY, max_retries=0, timeout=30) as client:
        _messages(anthropic, client, kvgate)


def _messages(anthropic: Any, client: Any, kvgate: RunningGateway) -> None:
    messages = [{"role": "user", "content": "Say hi"}]
    reply = client.messages.create(model=MODEL, max_tokens=6, messages=messages, system="Be brief.")
    assert reply.content[0].text and reply.usage.output_tokens == 6
    with client.messages.stream(model=MODEL, max_tokens=4, messages=messages) as stream:
        text = list(stream.text_stream)
        final = stream.get_final_message()
    assert len(text) == 4 and final.usage.output_tokens == 4
    assert client.messages.count_tokens(model=MODEL, messages=messages).input_tokens > 0
    with anthropic.Anthropic(base_url=kvgate.url, api_key="sk-wrong", max_retries=0) as bad, \
            pytest.raises(anthropic.AuthenticationError) as refused:
        bad.messages.create(model=MODEL, max_tokens=2, messages=messages)
    assert refused.value.body["type"] == "error"  # type: ignore[index]


def test_embeddings_on_the_pooling_cluster_only(kvgate: RunningGateway) -> None:
    with _openai(kvgate) as client:
        _embeddings(client)


def _embeddings(client: openai.OpenAI) -> None:
    reply = client.embeddings.create(model="embedder", input=["hello", "world"])
    assert len(reply.data) == 2 and reply.usage.prompt_tokens > 0
    with pytest.raises(openai.BadRequestError) as refused:
        client.embeddings.create(model=MODEL, input="x")  # a generate cluster
    assert refused.value.code == "model_not_supported" and refused.value.param == "model"
    models = {m.id: m.model_extra["serves"] for m in client.models.list().data}
    assert models[MODEL] == "generate" and models["embedder"] == "pooling"


def test_unknown_path_is_the_openai_404(kvgate: RunningGateway) -> None:
    reply = _post(kvgate, "/v1/nope", {})
    assert reply.status_code == 404 and reply.json()["error"]["message"].startswith("Unknown path: POST /v1/nope.")


BODIES = {
    "responses": ("/v1/responses", lambda model, stream: {"model": model, "input": "hi", "max_output_tokens": 4, "stream": stream}),
    "messages": ("/v1/messages", lambda model, stream: {"model": model, "max_tokens": 4, "stream": stream,
                                                         "messages": [{"role": "user", "content": "hi"}]}),
}


@pytest.mark.parametrize("api", sorted(BODIES))
@pytest.mark.parametrize("cluster", ["crefused", "c500", "c429", "cfirst"])
@pytest.mark.parametrize("stream", [False, True])
def test_failover_before_the_first_byte(kvgate: RunningGateway, api: str, cluster: str, stream: bool) -> None:
    path, body = BODIES[api]
    for _ in range(2):  # round-robin: once the broken endpoint first
        reply = _post(kvgate, path, body(cluster, stream))
        assert reply.status_code == 200, reply.text
        if stream or cluster != "cfirst":  # a first-event error exists in streams only
            assert reply.headers["x-kvgate-endpoint"] == f"{cluster}-good"


@pytest.mark.parametrize("api", sorted(BODIES))
def test_an_endpoint_5xx_in_the_api_error_shape(kvgate: RunningGateway, api: str) -> None:
    path, body = BODIES[api]
    reply = _post(kvgate, path, body("only500", False))
    assert reply.status_code == 502
    if api == "messages":
        assert reply.json()["type"] == "error" and reply.json()["error"]["type"] == "api_error"
    else:
        assert reply.json()["error"]["type"] == "server_error"


@pytest.mark.parametrize("api", sorted(BODIES))
def test_a_break_after_content_ends_with_the_api_error_event(kvgate: RunningGateway, api: str) -> None:
    path, body = BODIES[api]
    reply = _post(kvgate, path, body("cdrop", True))
    assert reply.status_code == 200
    tail = reply.text.strip().split("\n\n")[-1]
    if api == "messages":
        assert tail.startswith("event: error") and '"api_error"' in tail
    else:
        assert tail.startswith("event: response.failed") and "response.completed" not in reply.text


def test_messages_errors_have_anthropic_shape(kvgate: RunningGateway) -> None:
    reply = _post(kvgate, "/v1/messages", {"model": "nope", "max_tokens": 2, "messages": [{"role": "user", "content": "x"}]})
    assert reply.status_code == 404 and reply.json()["type"] == "error"
    assert reply.json()["error"]["type"] == "not_found_error"


@pytest.mark.parametrize("api", sorted(BODIES))
def test_a_client_that_leaves_mid_stream_is_cancelled(kvgate: RunningGateway, api: str) -> None:
    path, body = BODIES[api]
    sent = {**body("cslow", True), "max_output_tokens" if api == "responses" else "max_tokens": 400}  # ~20 s
    before = kvgate.metric("kvgate_requests_total", cluster="cslow", outcome="cancelled")
    headers = {"authorization": f"Bearer {KEY}"}
    with httpx.stream("POST", kvgate.url + path, json=sent, headers=headers, timeout=30) as reply:
        assert reply.status_code == 200
        next(reply.iter_raw())  # the stream started; the client leaves
    assert wait_until(lambda: kvgate.metric("kvgate_requests_total", cluster="cslow", outcome="cancelled") > before)


def test_generation_apis_naming_a_pooling_model_get_a_clear_400(kvgate: RunningGateway) -> None:
    """Chat, completions, Responses and Messages to a model served by pooling clusters alone: 400
    ``model_not_supported`` naming the API and the model (never the engine's 404), and not charged."""
    with _openai(kvgate) as client:
        calls = {
            "chat": lambda: client.chat.completions.create(model="embedder", messages=[{"role": "user", "content": "x"}]),
            "completions": lambda: client.completions.create(model="embedder", prompt="x", max_tokens=2),
            "responses": lambda: client.responses.create(model="embedder", input="x"),
        }
        for api, call in calls.items():
            with pytest.raises(openai.BadRequestError) as refused:
                call()
            body = refused.value.body
            assert refused.value.code == "model_not_supported", body
            assert "`embedder`" in body["message"] and f"the {api} API" in body["message"]  # type: ignore[index]
    anthropic = pytest.importorskip("anthropic")
    with anthropic.Anthropic(base_url=kvgate.url, api_key=KEY, max_retries=0, timeout=30) as claude, \
            pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model="embedder", max_tokens=2, messages=[{"role": "user", "content": "x"}])
    assert refused.value.body["type"] == "error" and "the messages API" in refused.value.body["error"]["message"]  # type: ignore[index]
    assert kvgate.metric("kvgate_requests_total", cluster="emb", outcome="client_error") == 0


def test_the_api_is_in_the_record_and_a_metric(kvgate: RunningGateway) -> None:
    with _openai(kvgate) as client:
        chat = client.chat.completions.with_raw_response.create(model=MODEL, messages=[{"role": "user", "content": "a"}],
                                                                max_tokens=2)
        created = client.responses.with_raw_response.create(model=MODEL, input="b", max_output_tokens=2)
        client.responses.retrieve(created.parse().id)
        embedded = client.embeddings.with_raw_response.create(model="embedder", input="c")
    records = httpx.get(kvgate.url + "/admin/requests?limit=50", headers=ADMIN, timeout=10).json()["data"]
    by_id = {record["id"]: record for record in records}
    assert by_id[chat.headers["x-request-id"]]["api"] == "chat"
    assert by_id[created.headers["x-request-id"]]["api"] == "responses"
    assert by_id[embedded.headers["x-request-id"]]["api"] == "embeddings"
    assert {"responses.retrieve"} <= {record["api"] for record in records}
    assert by_id[embedded.headers["x-request-id"]]["prompt_tokens"] > 0
    for api, model in (("chat", MODEL), ("responses", MODEL), ("responses.retrieve", MODEL), ("embeddings", "embedder")):
        assert kvgate.metric("kvgate_api_requests_total", api=api, model=model, outcome="success") >= 1, api


def test_every_upstream_call_of_a_stored_response_gets_a_client_span(sims: dict[str, Sim], refusing: RefusingPort) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    gateway = RunningGateway(_config(sims, refusing), tracer_provider=provider, health_checks=False).start()
    try:
        created = _post(gateway, "/v1/responses", {"model": MODEL, "input": "x", "max_output_tokens": 2}).json()["id"]
        headers = {"authorization": f"Bearer {KEY}"}
        calls = [("GET", f"/v1/responses/{created}"), ("POST", f"/v1/responses/{created}/cancel"),
                 ("DELETE", f"/v1/responses/{created}")]
        statuses = [httpx.request(method, gateway.url + path, headers=headers, timeout=30).status_code
                    for method, path in calls]
        assert statuses == [200, 400, 405]  # as vLLM answers (the cancel of a synchronous one, no DELETE route)
        assert wait_until(lambda: sum(s.kind is SpanKind.SERVER for s in exporter.get_finished_spans()) >= 4)
    finally:
        gateway.stop()
        provider.shutdown()
    spans = exporter.get_finished_spans()
    for method, path in calls:
        server = next(s for s in spans if s.kind is SpanKind.SERVER and s.name == f"{method} {path}")
        clients = [s for s in spans if s.parent is not None and s.parent.span_id == server.context.span_id]
        assert [c.kind for c in clients] == [SpanKind.CLIENT], (method, path)
        assert clients[0].attributes["http.request.method"] == method
        assert clients[0].attributes["kvgate.endpoint"] in ("gen-a", "gen-b")
    retrieve = next(s for s in spans if s.kind is SpanKind.CLIENT and s.attributes["http.request.method"] == "GET")
    assert retrieve.attributes["gen_ai.operation.name"] == "responses.retrieve"


def test_large_bodies_of_the_other_apis_are_parsed_off_the_loop(sims: dict[str, Sim], refusing: RefusingPort) -> None:
    """Above ``[server] parse_offload_bytes`` a Responses or embeddings body is parsed in the worker
    process, as chat's is: the same answer, and a bad large body is the same 400 as a small one."""
    config = {**_config(sims, refusing), "server": {"parse_offload_bytes": 4096}}
    gateway = RunningGateway(config, health_checks=False).start()
    try:
        long_input = "a long input " * 800  # ~10 KB
        with _openai(gateway) as client:
            answer = client.responses.create(model=MODEL, input=long_input, max_output_tokens=3)
            vectors = client.embeddings.create(model="embedder", input=[long_input, "short"])
        offload = gateway.app.state.container.proxy._parse_offload
        assert offload is not None and any(worker is not None and worker.alive for worker in offload._pool)
        assert answer.usage is not None and answer.usage.input_tokens > 1000 and answer.output_text
        assert len(vectors.data) == 2 and vectors.usage.prompt_tokens > 1000
        bad = [_post(gateway, "/v1/responses", {"model": MODEL, "input": 7, "pad": "x" * size}) for size in (8000, 1)]
        assert [r.status_code for r in bad] == [400, 400] and bad[0].json() == bad[1].json()
    finally:
        gateway.stop()
