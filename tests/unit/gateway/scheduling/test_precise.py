"""Precise mode end to end in-process: vLLM-shaped KV event batches over a real ZMQ socket on
loopback, sequence gaps and restarts, the ``tokenize`` producer against a real HTTP ``/tokenize``,
the ``precise-prefix`` scorer in the ``prefix-precise`` profile and its fallbacks."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import msgspec
import pytest
import zmq
from aiohttp import web

from gateway.config import ConfigError, RoutingSettings
from gateway.endpoints.model import Endpoint, EndpointSpec
from gateway.scheduling import kv_subscriber
from gateway.scheduling.kv_events import KvBlockSets
from gateway.scheduling.kv_subscriber import KvEventSubscriber, resolver
from gateway.scheduling.scorers.precise_prefix import PrecisePrefixScorer
from gateway.scheduling.tokens import TokenizeClient, tokenize_body
from gateway.protocol.openai import Operation

from tests.unit.gateway.scheduling.support import candidate, chat, context, scheduler
from tests.support.loopback import free_port, until

BLOCK = 128
TOKENS = list(range(1000, 1000 + 7 * BLOCK + 40))  # 7 whole blocks and a tail


# -- vLLM's wire shapes (vllm/distributed/kv_events.py, 0.32), re-declared for the test publisher --
class Event(msgspec.Struct, tag=True, omit_defaults=True):
    pass


class BlockStored(Event):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = "GPU"


class BlockRemoved(Event):
    block_hashes: list[int]
    medium: str | None = "GPU"


class AllBlocksCleared(Event):
    pass


class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True):
    ts: float
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]
    data_parallel_rank: int | None = None


ENCODER = msgspec.msgpack.Encoder()


def frames(topic: str, seq: int, *events: Event) -> list[bytes]:
    return [topic.encode(), seq.to_bytes(8, "big"), ENCODER.encode(EventBatch(0.0, list(events)))]


def stored(first: int, blocks: int, parent: int | None = None, start: int = 0) -> BlockStored:
    return BlockStored(list(range(first, first + blocks)), parent, TOKENS[start:start + blocks * BLOCK], BLOCK)


def worker(name: str, port: int = 1) -> Endpoint:
    return Endpoint(EndpointSpec(name, "c", f"http://127.0.0.1:{port}/v1", "m"))


# -- the subscriber ----------------------------------------------------------------------------
async def test_batches_over_a_real_zmq_socket_fill_the_worker_set() -> None:
    sets = KvBlockSets()
    bind = f"tcp://127.0.0.1:{free_port()}"
    endpoints = [worker("local-0", 8101), worker("local-1", 8102)]
    subscriber = KvEventSubscriber(bind, sets, resolver(lambda: endpoints))
    task = await kv_subscriber.start(subscriber)
    assert task is not None
    context_ = zmq.Context()
    pub = context_.socket(zmq.PUB)
    pub.connect(bind)  # as vLLM does with a concrete tcp:// address
    try:
        while subscriber.unknown == 0:  # the slow joiner: probe until the subscription reached the publisher
            pub.send_multipart(frames("probe", 0))
            await asyncio.sleep(0.01)
        pub.send_multipart(frames("http://127.0.0.1:8101", 0, stored(1, 4)))  # topic: the worker's origin
        pub.send_multipart(frames("http://127.0.0.1:8101", 1, stored(5, 3, parent=4, start=4 * BLOCK)))
        pub.send_multipart(frames("local-1", 0, stored(1, 2)))  # topic: the endpoint's name
        while subscriber.batches < 3:
            await asyncio.sleep(0.01)
    finally:
        pub.close(0)
        context_.term()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        subscriber.close()
    assert sets.match("local-0", TOKENS) == 7 * BLOCK
    assert sets.match("local-1", TOKENS) == 2 * BLOCK
    assert sets.block_size("local-0") == BLOCK and subscriber.cleared == 0


def test_a_gap_or_a_restart_clears_the_worker_set_and_unknown_topics_drop() -> None:
    sets = KvBlockSets()
    subscriber = KvEventSubscriber("tcp://127.0.0.1:1", sets, resolver(lambda: [worker("w")]))
    assert subscriber.handle(frames("w", 0, stored(1, 3))) == "w"
    assert sets.match("w", TOKENS) == 3 * BLOCK
    subscriber.handle(frames("w", 2, stored(10, 1, parent=3, start=3 * BLOCK)))  # batch 1 was lost
    assert sets.match("w", TOKENS) == 0 and subscriber.cleared == 1  # never claims what it may have missed
    subscriber.handle(frames("w", 3, stored(20, 2)))
    assert sets.match("w", TOKENS) == 2 * BLOCK
    subscriber.handle(frames("w", 0, stored(30, 1)))  # a new engine: its publisher counts from 0 again
    assert sets.match("w", TOKENS) == BLOCK and subscriber.cleared == 2
    subscriber.handle(frames("w", 1, BlockRemoved([30]), stored(40, 1, start=0)))
    assert sets.match("w", TOKENS) == BLOCK
    subscriber.handle(frames("w", 2, AllBlocksCleared()))
    assert sets.size("w") == 0 and sets.known("w")
    assert subscriber.handle(frames("nobody", 0, stored(1, 1))) is None and subscriber.unknown == 1
    assert subscriber.handle([b"w", b"\x00" * 8, b"\xc1"]) is None and subscriber.bad == 1  # not msgpack
    assert subscriber.handle([b"w"]) is None and subscriber.bad == 2


def test_offloaded_copies_are_not_engine_blocks() -> None:
    sets = KvBlockSets()
    sets.apply_batch("w", 0, [{"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None,
                               "token_ids": TOKENS[:BLOCK], "block_size": BLOCK, "medium": "CPU"}])
    assert sets.size("w") == 0


def test_enabled_without_the_extra_is_a_clear_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "zmq" else real(name, *a))
    with pytest.raises(ConfigError, match=r"routing.kv_events.enabled: precise mode needs zmq .*\[precise\]"):
        kv_subscriber.require_extra()


def test_kv_events_settings() -> None:
    assert RoutingSettings(kv_events={"bind": "tcp://*:6000"}).kv_events.connect == "tcp://127.0.0.1:6000"
    with pytest.raises(ValueError, match="tcp://HOST:PORT"):
        RoutingSettings(kv_events={"bind": "127.0.0.1:6000"})


# -- the tokenize producer and the precise-prefix scorer ------------------------------------
def test_tokenize_bodies() -> None:
    body = {"messages": [{"role": "user", "content": "x"}], "tools": [], "temperature": 0}
    assert tokenize_body(body, Operation.CHAT, "served") == {"model": "served", "messages": body["messages"], "tools": []}
    assert tokenize_body({"prompt": "abc"}, Operation.COMPLETION, "s") == {"model": "s", "prompt": "abc"}
    assert tokenize_body({"prompt": ["a", "b"]}, Operation.COMPLETION, "s") is None


def test_the_scorer_falls_back_to_the_approximate_index() -> None:
    scorer = PrecisePrefixScorer()
    ctx = context(blocks=10)
    exact = [candidate("a", matched=10, precise=0), candidate("b", matched=0, precise=500)]
    assert scorer.score(ctx, exact) == [1.0, 0.0]  # no prompt tokens: the byte index
    ctx.prompt_tokens = 1000
    assert scorer.score(ctx, exact) == [0.0, 0.5]
    assert scorer.score(ctx, [candidate("a", matched=10, precise=0), candidate("b", matched=5)]) == [1.0, 0.5]


class Tokenizer:
    """A real HTTP ``/tokenize`` on loopback: answers TOKENS, or fails when told to."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.fail = False

    async def tokenize(self, request: web.Request) -> web.Response:
        self.bodies.append(await request.json())
        if self.fail:
            return web.json_response({"error": {"message": "no"}}, status=500)
        return web.json_response({"count": len(TOKENS), "max_model_len": 2048, "tokens": TOKENS})


@pytest.fixture
async def tokenizer() -> Any:
    served = Tokenizer()
    app = web.Application()
    app.router.add_post("/tokenize", served.tokenize)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    served.port = port  # type: ignore[attr-defined]
    yield served
    await runner.cleanup()


async def test_prefix_precise_ranks_by_the_engine_blocks_and_predicts_them(tokenizer: Tokenizer) -> None:
    sched = scheduler("prefix-precise", producer_deadline_ms=60_000)  # a loaded CI machine must not time it out
    client = TokenizeClient()
    sets = sched._producers["tokenize"]._sets  # the deps' block sets (support builds default deps)
    sched._producers["tokenize"]._client = client
    a, b = worker("a", tokenizer.port), worker("b", tokenizer.port)  # type: ignore[attr-defined]
    sets.apply_batch("a", 0, [{"type": "BlockStored", "block_hashes": [1, 2], "parent_block_hash": None,
                               "token_ids": TOKENS[:2 * BLOCK], "block_size": BLOCK}])
    sets.apply_batch("b", 0, [{"type": "BlockStored", "block_hashes": [1, 2, 3, 4, 5, 6, 7], "parent_block_hash": None,
                               "token_ids": TOKENS[:7 * BLOCK], "block_size": BLOCK}])
    request = chat("system prompt " * 50)
    try:
        decision = await sched.schedule([a, b], request)
        assert [e.spec.name for e in decision.ranked][0] == "b"
        assert tokenizer.bodies[-1] == {"model": "m", "messages": request.body["messages"]}
        assert decision.breakdown["b"]["precise-prefix"] == pytest.approx(7 * BLOCK / len(TOKENS))
        assert decision.predicted("b") == 7 * BLOCK and decision.predicted("a") == 2 * BLOCK
        assert "tokenize" in decision.hints

        tokenizer.fail = True  # the producer fails: no hint, the byte-block index decides
        decision = await sched.schedule([a, b], request)
        assert "tokenize" not in decision.hints
        assert decision.candidates["b"].precise is None  # scored by the approximate prefix scorer
        assert decision.predicted("b") == decision._approximate(decision.candidates["b"])
    finally:
        await client.aclose()


async def test_no_events_yet_means_no_round_trip(tokenizer: Tokenizer) -> None:
    sched = scheduler("prefix-precise")
    decision = await sched.schedule([worker("a", tokenizer.port), worker("b", tokenizer.port)],  # type: ignore[attr-defined]
                                    chat("hello " * 100))
    assert tokenizer.bodies == [] and "tokenize" not in decision.hints
    sched._producers["tokenize"]._sets.apply_batch("a", 0, [])  # a publishes, but it is alone
    decision = await sched.schedule([worker("a", tokenizer.port)], chat("hello " * 100))  # type: ignore[attr-defined]
    assert tokenizer.bodies == [] and "tokenize" not in decision.hints


# -- the service: built with routing.kv_events on ------------------------------------------
def service(bind: str, metrics: Any = None) -> Any:
    from prometheus_client import CollectorRegistry

    from gateway.config import StateSettings
    from gateway.endpoints.registry import EndpointRegistry
    from gateway.scheduling.service import SchedulingService
    from gateway.state.memory import MemoryStore

    routing = RoutingSettings(policy="prefix-precise", kv_events={"enabled": True, "bind": bind})
    return SchedulingService(routing, StateSettings(), EndpointRegistry({}), metrics_registry=metrics or CollectorRegistry(),
                             store=MemoryStore())


def test_the_service_refuses_to_build_without_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "msgspec" else real(name, *a))
    with pytest.raises(ConfigError, match="precise mode needs msgspec"):
        service("tcp://127.0.0.1:1")


async def test_the_service_binds_feeds_the_scheduler_and_a_restart_clears() -> None:
    bind = f"tcp://127.0.0.1:{free_port()}"
    built = service(bind)
    await built.start()
    try:
        assert built._kv_task is not None and built.kv_subscriber is not None
        assert built.scheduler._producers["tokenize"]._sets is built.kv  # one set for subscriber and producer
        built.kv.apply_batch("w", 0, [msgspec.to_builtins(stored(1, 2))])
        assert built.kv.size("w") == 2
        built._on_restart(worker("w"))
        assert built.kv.size("w") == 0
        taken = service(bind)  # the same address again: logged, no task, decisions fall back
        await taken.start()
        assert taken._kv_task is None
        await taken.stop()
    finally:
        await built.stop()
    assert built._kv_task is None


# -- connect mode: workers bind their publisher, every gateway process connects --------------
def test_an_endpoint_kv_events_address_is_a_concrete_zmq_address() -> None:
    from pydantic import ValidationError

    from gateway.config.clusters import EndpointSettings

    ok = EndpointSettings(url="http://w:8000/v1", model="m", kv_events="tcp://w:5557")
    assert ok.kv_events == "tcp://w:5557" and EndpointSettings(url="http://w:8000/v1", model="m").kv_events is None
    for good in ("tcp://[::1]:5557", "ipc:///tmp/kv", "tcp://10.0.0.0:1"):
        assert EndpointSettings(url="http://w:8000/v1", model="m", kv_events=good).kv_events == good
    for bad in ("http://w:5557", "tcp://*:5557", "w:5557", "tcp://w", "tcp://w:", "ipc://", "tcp://a b:1",
                "tcp://w:5557 ", "tcp://w:99999", "tcp://w:0"):
        with pytest.raises(ValidationError, match="tcp://HOST:PORT|concrete host|ipc:// address|printable"):
            EndpointSettings(url="http://w:8000/v1", model="m", kv_events=bad)
    with pytest.raises(ValidationError, match="tcp://HOST:PORT"):
        RoutingSettings(kv_events={"bind": "tcp://127.0.0.1"})
    assert RoutingSettings(kv_events={"bind": ""}).kv_events.connect is None  # no bind: nothing for local workers


async def test_connect_mode_subscribes_to_each_worker_and_follows_the_registry() -> None:
    from prometheus_client import CollectorRegistry

    from gateway.endpoints.registry import EndpointRegistry

    context_ = zmq.Context()
    publishers, addresses = [], []
    for _ in range(2):  # two workers binding their own publisher, as vLLM does with tcp://*:PORT
        pub = context_.socket(zmq.PUB)
        port = pub.bind_to_random_port("tcp://127.0.0.1")
        publishers.append(pub)
        addresses.append(f"tcp://127.0.0.1:{port}")
    endpoints = [Endpoint(EndpointSpec(f"w{i}", "c", f"http://127.0.0.1:{8200 + i}/v1", "m", kv_events=address))
                 for i, address in enumerate(addresses)]
    registry = EndpointRegistry({"c": tuple(endpoints)})
    metrics = CollectorRegistry()
    built = service("", metrics)  # no bind at all: connect mode only
    built.registry = registry
    await built.start()
    try:
        assert built._kv_task is None and built.kv_connections is not None
        assert built.kv_connections.addresses == {"w0": addresses[0], "w1": addresses[1]}
        seq = [0, 0]

        def probe() -> bool:  # the slow joiner: empty batches until both subscriptions arrived
            for i, pub in enumerate(publishers):
                pub.send_multipart(frames("any-topic", seq[i]))
                seq[i] += 1
            return built.kv.known("w0") and built.kv.known("w1")

        await until(probe, "a batch from each worker")
        before = built.kv_subscriber.batches
        publishers[0].send_multipart(frames("the topic is ignored", seq[0], stored(1, 3)))
        publishers[1].send_multipart(frames("w0", seq[1], stored(1, 5)))  # the socket names the worker, not the topic
        await until(lambda: built.kv_subscriber.batches >= before + 2, "both stored batches")
        assert built.kv.match("w0", TOKENS) == 3 * BLOCK and built.kv.match("w1", TOKENS) == 5 * BLOCK
        applied = [metrics.get_sample_value("kvgate_kv_event_batches_total", {"endpoint": w, "outcome": "applied"})
                   for w in ("w0", "w1")]
        assert applied[0] >= 2 and applied[1] >= 2 and sum(applied) == built.kv_subscriber.batches  # each counted once
        publishers[0].send_multipart(frames("w0", seq[0] + 5, stored(9, 1)))  # batches lost: the set is cleared first
        await until(lambda: metrics.get_sample_value("kvgate_kv_event_batches_total",
                                                     {"endpoint": "w0", "outcome": "gap"}) is not None, "the gap")
        assert built.kv.match("w0", TOKENS) == BLOCK  # the 3 blocks before the gap are gone, the new one is held
        registry.remove("w1")
        built.kv_connections.sync()
        assert built.kv_connections.addresses == {"w0": addresses[0]}
        assert not built.kv.known("w1") and built.kv.size("w1") == 0  # a socket that goes forgets its worker
    finally:
        await built.stop()
        for pub in publishers:
            pub.close(0)
        context_.term()
    assert built._kv_connect_task is None and built.kv_connections.addresses == {}


def test_tokenize_asks_the_least_busy_endpoint_and_spreads_ties() -> None:
    from gateway.scheduling.tokens import TokenizeProducer

    producer = TokenizeProducer(KvBlockSets(), TokenizeClient())
    endpoints = [worker(f"w{i}", 8300 + i) for i in range(3)]
    asked = [producer.pick(endpoints).spec.name for _ in range(6)]
    assert sorted(asked) == ["w0", "w0", "w1", "w1", "w2", "w2"]  # idle workers: each in turn
    endpoints[0].in_flight = endpoints[2].in_flight = 4
    assert {producer.pick(endpoints).spec.name for _ in range(6)} == {"w1"}  # the least busy one


async def test_start_then_stop_at_once_closes_everything() -> None:
    """The connect task cancelled before it ever ran: stop() still closes every socket (a ZMQ
    context with an open socket would block its termination forever)."""
    from gateway.endpoints.registry import EndpointRegistry

    built = service("")
    built.registry = EndpointRegistry({"c": (Endpoint(EndpointSpec("w", "c", "http://127.0.0.1:1/v1", "m",
                                                                    kv_events=f"tcp://127.0.0.1:{free_port()}")),)})
    await built.start()
    assert built.kv_connections.addresses  # subscribed at start
    await asyncio.wait_for(built.stop(), 5)
    assert built.kv_connections.addresses == {} and built.kv_subscriber._context is None


async def test_an_address_libzmq_refuses_is_skipped_and_the_others_subscribe(monkeypatch: pytest.MonkeyPatch) -> None:
    endpoints = [worker("bad"), worker("good")]
    endpoints[0].spec = EndpointSpec("bad", "c", "http://127.0.0.1:1/v1", "m", kv_events="tcp://no-such-host.invalid:1")
    endpoints[1].spec = EndpointSpec("good", "c", "http://127.0.0.1:2/v1", "m", kv_events=f"tcp://127.0.0.1:{free_port()}")
    subscriber = KvEventSubscriber("", KvBlockSets(), resolver(lambda: endpoints))
    real = subscriber.connect
    calls: list[str] = []

    def connect(address: str) -> Any:
        calls.append(address)
        if "invalid" in address:
            raise zmq.ZMQError(22, "Invalid argument")
        return real(address)

    monkeypatch.setattr(subscriber, "connect", connect)
    connections = kv_subscriber.KvEventConnections(subscriber, KvBlockSets(), lambda: endpoints)
    connections.sync()
    connections.sync()  # the refused address is not retried every round (nor logged again)
    try:
        assert list(connections.addresses) == ["good"] and calls.count("tcp://no-such-host.invalid:1") == 1
    finally:
        await connections.aclose()
        subscriber.close()


def test_a_set_with_blocks_stored_on_unseen_parents_is_incomplete_until_they_go() -> None:
    sets = KvBlockSets()
    sets.apply_batch("w", 7, [msgspec.to_builtins(stored(1, 2))])  # a late subscription: the root chain is seen
    assert sets.complete("w")
    sets.apply_batch("w", 8, [msgspec.to_builtins(stored(50, 2, parent=40, start=2 * BLOCK))])  # parent 40 unseen
    assert not sets.complete("w") and sets.match("w", TOKENS) == 2 * BLOCK
    sets.apply_batch("w", 9, [msgspec.to_builtins(BlockRemoved([50]))])
    assert not sets.complete("w")
    sets.apply_batch("w", 10, [msgspec.to_builtins(BlockRemoved([51]))])  # the last orphan evicted
    assert sets.complete("w")
    sets.apply_batch("w", 11, [msgspec.to_builtins(stored(60, 1, parent=99))])
    sets.apply_batch("w", 12, [msgspec.to_builtins(AllBlocksCleared())])
    assert sets.complete("w")


async def test_an_incomplete_set_is_not_used_for_precise_decisions(tokenizer: Tokenizer) -> None:
    from gateway.scheduling.tokens import TokenizeProducer

    sets = KvBlockSets()
    for name in ("w0", "w1"):
        sets.apply_batch(name, 0, [msgspec.to_builtins(stored(1, 2))])
    sets.apply_batch("w1", 1, [msgspec.to_builtins(stored(50, 1, parent=40))])  # w1 subscribed late
    client = TokenizeClient()
    producer = TokenizeProducer(sets, client)
    endpoints = [worker("w0", tokenizer.port), worker("w1", tokenizer.port)]  # type: ignore[attr-defined]
    try:
        view = await producer.produce(context(), endpoints)
    finally:
        await client.aclose()
    assert view is not None and set(view.matched) == {"w0"}  # w1 gets no precise value: the scorer falls back


async def test_the_admin_endpoint_view_says_why_precise_mode_falls_back() -> None:
    from types import SimpleNamespace

    from gateway.api.admin import _kv_events
    from gateway.endpoints.registry import EndpointRegistry

    endpoint = Endpoint(EndpointSpec("w", "c", "http://127.0.0.1:1/v1", "m", kv_events=f"tcp://127.0.0.1:{free_port()}"))
    built = service("")
    built.registry = EndpointRegistry({"c": (endpoint,)})
    request = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(routing=built)))
    await built.start()
    try:
        assert {k: v for k, v in _kv_events(request, endpoint).items() if k not in ("state", "error")} == {
            "address": endpoint.spec.kv_events, "publishing": False, "complete": True, "blocks": 0, "block_size": None}
        built.kv.apply_batch("w", 3, [msgspec.to_builtins(stored(50, 2, parent=40))])  # joined late: orphans
        view = _kv_events(request, endpoint)
        assert (view["publishing"], view["complete"], view["blocks"]) == (True, False, 0)
    finally:
        await built.stop()
    off = SimpleNamespace(app=SimpleNamespace(state=SimpleNamespace(routing=SimpleNamespace(kv=built.kv, kv_subscriber=None))))
    assert _kv_events(off, endpoint) is None  # precise mode off: nothing to show
