"""A connect-mode KV-event socket says what it is doing: the monitor's events folded into a state
and the last error (``scheduling/kv_link.py``), over real ZMQ sockets for a reached publisher, a
port nobody binds, a host that does not resolve and an address libzmq refuses; and the
combinations of policy and ``[routing.kv_events]`` that run but not as meant are logged at build."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import zmq

from gateway.config import RoutingSettings, StateSettings
from gateway.endpoints.model import Endpoint, EndpointSpec
from gateway.scheduling import kv_link, kv_subscriber
from gateway.scheduling.kv_events import KvBlockSets
from gateway.scheduling.kv_link import LinkState
from gateway.scheduling.kv_subscriber import KvEventConnections, KvEventSubscriber, resolver

from tests.support.loopback import free_port, until


def test_the_fold() -> None:
    link = LinkState("tcp://w:1")
    assert link.view() == {"address": "tcp://w:1", "state": "connecting", "error": None}
    link.event("CONNECT_RETRIED")  # no attempt started: the name did not resolve
    assert link.state == "retrying" and link.error is not None and "does not resolve" in link.error
    for name in ("CONNECT_DELAYED", "CLOSED", "CONNECT_RETRIED"):  # an attempt that failed
        link.event(name)
    assert link.state == "retrying" and link.error is not None and "connection failed" in link.error
    for name in ("CONNECT_DELAYED", "CONNECTED", "HANDSHAKE_SUCCEEDED"):
        link.event(name)
    assert (link.state, link.error) == ("connected", None)
    link.event("DISCONNECTED")
    link.event("CONNECT_RETRIED")  # redialling a worker that went away: still "disconnected"
    assert link.state == "disconnected" and link.error is not None and "closed the connection" in link.error
    link.event("HANDSHAKE_FAILED_PROTOCOL")
    assert link.state == "retrying" and link.error is not None and "handshake failed" in link.error
    link.refused(zmq.ZMQError(22, "Invalid argument"))
    assert link.view() == {"address": "tcp://w:1", "state": "refused", "error": "libzmq refused the address: Invalid argument"}
    assert set(kv_link.STATES) >= {"connecting", "connected", "retrying", "disconnected", "refused", "stopped"}


def _endpoint(name: str, address: str) -> Endpoint:
    return Endpoint(EndpointSpec(name, "c", f"http://127.0.0.1:{free_port()}/v1", "m", kv_events=address))


async def test_each_socket_says_whether_its_worker_is_reached_and_why_not() -> None:
    context = zmq.Context()
    publisher = context.socket(zmq.PUB)
    port = publisher.bind_to_random_port("tcp://127.0.0.1")
    endpoints = [
        _endpoint("up", f"tcp://127.0.0.1:{port}"),
        _endpoint("nobody", f"tcp://127.0.0.1:{free_port()}"),
        _endpoint("unresolved", "tcp://no-such-host.invalid:1"),
        _endpoint("refused", "ipc:///tmp/" + "x" * 200),  # longer than a socket path can be: libzmq refuses it
    ]
    subscriber = KvEventSubscriber("", KvBlockSets(), resolver(lambda: endpoints))
    connections = KvEventConnections(subscriber, KvBlockSets(), lambda: endpoints)
    connections.sync()
    try:
        def states() -> dict[str, Any]:
            return {e.spec.name: (connections.link(e.spec.name) or {}).get("state") for e in endpoints}

        await until(lambda: states() == {"up": "connected", "nobody": "retrying", "unresolved": "retrying",
                                         "refused": "refused"}, "each socket's state")
        views = {e.spec.name: connections.link(e.spec.name) for e in endpoints}
        assert views["up"] == {"address": endpoints[0].spec.kv_events, "state": "connected", "error": None}
        assert "connection failed" in views["nobody"]["error"]
        assert "does not resolve" in views["unresolved"]["error"]
        assert views["refused"]["address"] == endpoints[3].spec.kv_events
        assert views["refused"]["error"].startswith("libzmq refused the address: ")
        assert connections.link("none-such") is None
        endpoints.pop(1)
        connections.sync()
        assert connections.link("nobody") is None  # gone from the registry: forgotten
    finally:
        await connections.aclose()
        subscriber.close()
        publisher.close(0)
        context.term()


async def test_a_reader_that_ends_is_shown_and_resubscribed(monkeypatch: pytest.MonkeyPatch) -> None:
    endpoints = [_endpoint("w", f"tcp://127.0.0.1:{free_port()}")]
    subscriber = KvEventSubscriber("", KvBlockSets(), resolver(lambda: endpoints))
    real = subscriber.run
    runs = []

    async def run(socket: Any, worker: str | None = None) -> None:
        runs.append(worker)
        if len(runs) == 1:
            socket.close(0)
            raise zmq.ZMQError(156384765, "Context was terminated")
        await real(socket, worker)

    monkeypatch.setattr(subscriber, "run", run)
    connections = KvEventConnections(subscriber, KvBlockSets(), lambda: endpoints)
    connections.sync()
    try:
        await until(lambda: (connections.link("w") or {}).get("state") == "stopped", "the reader's end")
        assert "the reader ended: ZMQError" in connections.link("w")["error"] and connections.addresses == {}
        connections.sync()
        view = connections.link("w")
        assert connections.addresses == {"w": endpoints[0].spec.kv_events}
        await until(lambda: runs == ["w", "w"], "a second reader")
        assert view["state"] in ("connecting", "retrying") and view["error"]  # the last problem still shown
    finally:
        await connections.aclose()
        subscriber.close()


@pytest.mark.parametrize(("policy", "events", "addressed", "expected"), [
    ("prefix-precise", {}, False, "scores by KV events but routing.kv_events.enabled is false"),
    ("prefix-aware", {"enabled": True}, True, "has no precise-prefix scorer: KV events are received and never used"),
    ("prefix-aware", {}, True, "1 endpoint(s) have a kv_events address but routing.kv_events.enabled is false"),
    ("prefix-precise", {"enabled": True, "bind": ""}, False, "no KV events can arrive"),
])
def test_the_service_logs_what_runs_but_not_as_meant(caplog: pytest.LogCaptureFixture, policy: str,
                                                      events: dict[str, Any], addressed: bool, expected: str) -> None:
    from prometheus_client import CollectorRegistry

    from gateway.endpoints.registry import EndpointRegistry
    from gateway.scheduling.service import SchedulingService
    from gateway.state.memory import MemoryStore

    spec = EndpointSpec("w", "c", "http://127.0.0.1:1/v1", "m", kv_events="tcp://w:5557" if addressed else None)
    registry = EndpointRegistry({"c": (Endpoint(spec),)})
    with caplog.at_level(logging.WARNING, logger="kvgate.kv_events"):
        SchedulingService(RoutingSettings(policy=policy, kv_events=events), StateSettings(), registry,
                          metrics_registry=CollectorRegistry(), store=MemoryStore())
    assert [r.getMessage() for r in caplog.records if expected in r.getMessage()], caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvgate.kv_events"):  # as meant: nothing said
        SchedulingService(RoutingSettings(policy="prefix-precise", kv_events={"enabled": True}), StateSettings(),
                          registry, metrics_registry=CollectorRegistry(), store=MemoryStore())
    assert caplog.records == []
    assert kv_subscriber.EXTRA_MODULES  # the extra is installed here (zmq imported above)
