"""ManagedEndpoints: supervisor statuses -> registry changes, with a real registry and supervisor."""

from __future__ import annotations

import pytest

from backends.kv.report import ReportedCapacity
from backends.workers.lifecycle import Phase, RestartPolicy, WorkerState
from backends.workers.spec import WorkerSpec
from backends.workers.supervisor import WorkerSupervisor
from backends.workers.status import WorkerStatus
from gateway.endpoints.managed import ManagedEndpoints
from gateway.endpoints.model import Endpoint, EndpointSpec, Health
from gateway.endpoints.registry import EndpointRegistry
from gateway.config import build_settings
from tests.support.fake_workers import FakeRunner, FakeTime, worker_spec


def status(name: str, phase: Phase, spec: WorkerSpec | None = None) -> WorkerStatus:
    return WorkerStatus.of(name, spec or worker_spec(8001), WorkerState(phase=phase), None, None, None, now=0.0, wall=0.0)


def adapter(registry: EndpointRegistry, time: FakeTime | None = None) -> ManagedEndpoints:
    time = time or FakeTime()
    return ManagedEndpoints(registry, "fast", poll_s=0.5, sleep=time.sleep, clock=time.clock)


async def test_ready_admits_a_healthy_managed_endpoint() -> None:
    registry = EndpointRegistry({})
    managed = adapter(registry)
    await managed.worker_changed(status("w0", Phase.READY, worker_spec(8123, served="smollm2")))
    (endpoint,) = registry.cluster("fast")
    assert (endpoint.name, endpoint.spec.base_url, endpoint.spec.served_model) == ("w0", "http://127.0.0.1:8123/v1", "smollm2")
    assert endpoint.spec.effective_health_url() == "http://127.0.0.1:8123/health"
    assert endpoint.health is Health.HEALTHY and endpoint.routable and endpoint.source == "managed"
    assert managed.names == {"w0"}


@pytest.mark.parametrize("phase", [Phase.STOPPING, Phase.STOPPED, Phase.FAILED, Phase.LAUNCHING, Phase.WARMING])
async def test_leaving_ready_removes_and_ready_again_readmits_fresh(phase: Phase) -> None:
    registry = EndpointRegistry({})
    managed = adapter(registry)
    await managed.worker_changed(status("w0", Phase.READY))
    first = registry.find("w0")
    assert first is not None
    first.record_check(False, "down")
    await managed.worker_changed(status("w0", phase))
    assert registry.find("w0") is None and managed.names == frozenset()
    await managed.worker_changed(status("w0", Phase.READY))
    again = registry.find("w0")
    assert again is not None and again is not first and again.health is Health.HEALTHY


async def test_drain_marks_draining_and_waits_for_in_flight_to_end() -> None:
    registry, time = EndpointRegistry({}), FakeTime()
    managed = adapter(registry, time)
    await managed.worker_changed(status("w0", Phase.READY))
    endpoint = registry.find("w0")
    assert endpoint is not None
    endpoint.acquire()
    endpoint.acquire()

    async def finishing_sleep(seconds: float) -> None:  # one request ends per poll
        await time.sleep(seconds)
        endpoint.release()

    managed._sleep = finishing_sleep
    await managed.worker_changed(status("w0", Phase.DRAINING))
    assert endpoint.draining and not endpoint.routable
    await managed.drain(status("w0", Phase.DRAINING), timeout_s=30.0)
    assert endpoint.in_flight == 0 and time.sleeps == [0.5, 0.5]


async def test_drain_wait_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    registry, time = EndpointRegistry({}), FakeTime()
    managed = adapter(registry, time)
    await managed.worker_changed(status("w0", Phase.READY))
    endpoint = registry.find("w0")
    assert endpoint is not None
    endpoint.acquire()  # never released
    await managed.drain(status("w0", Phase.DRAINING), timeout_s=2.0)
    assert time.now == 2.0 and endpoint.in_flight == 1
    assert "1 request(s) still in flight after 2 s" in caplog.text


async def test_configured_endpoints_are_never_touched(caplog: pytest.LogCaptureFixture) -> None:
    configured = Endpoint(EndpointSpec("w0", "fast", "http://10.0.0.1:8000/v1", "m"))
    registry = EndpointRegistry({"fast": (configured,)})
    managed = adapter(registry)
    await managed.worker_changed(status("w0", Phase.READY))
    await managed.worker_changed(status("w0", Phase.DRAINING))
    await managed.worker_changed(status("w0", Phase.STOPPED))
    assert registry.cluster("fast") == (configured,) and not configured.draining
    assert "an endpoint of that name exists already" in caplog.text


async def test_for_settings_uses_configured_thresholds() -> None:
    settings = build_settings({"health": {"unhealthy_threshold": 1}})
    registry = EndpointRegistry({})
    managed = ManagedEndpoints.for_settings(registry, settings.health, settings.circuit, "fast")
    await managed.worker_changed(status("w0", Phase.READY))
    endpoint = registry.find("w0")
    assert endpoint is not None
    endpoint.record_check(False, "down")
    assert endpoint.health is Health.UNHEALTHY  # one failed check is enough


async def test_with_a_supervisor_a_crashed_worker_leaves_and_comes_back() -> None:
    registry, time, runner = EndpointRegistry({}), FakeTime(), FakeRunner()

    async def probe(spec: WorkerSpec, log_path: object) -> ReportedCapacity | None:
        return None

    sup = WorkerSupervisor([("w0", worker_spec(8001)), ("w1", worker_spec(8002))], runner,
                           policy=RestartPolicy(), clock=time.clock, sleep=time.sleep,
                           planner=lambda spec: None, capacity_probe=probe)
    await sup.subscribe(adapter(registry, time))
    await sup.start()
    try:
        await sup.wait_ready(5.0)
        assert {e.name for e in registry.cluster("fast")} == {"w0", "w1"}
        runner.created["w1"][0].exit(-9)
        await sup.wait_for("w1", lambda s: s.phase is Phase.FAILED, 5.0)
        assert [e.name for e in registry.cluster("fast")] == ["w0"]
        await sup.wait_for("w1", lambda s: s.phase is Phase.READY, 5.0)
        assert {e.name for e in registry.cluster("fast")} == {"w0", "w1"}
    finally:
        await sup.stop()
    assert registry.cluster("fast") == ()
