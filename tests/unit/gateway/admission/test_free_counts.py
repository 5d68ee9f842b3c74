"""Free admissions are plain ints on the hot path and reach the Prometheus counters at scrape time."""

from __future__ import annotations

from gateway.admission.gate import AdmissionGate, Ask
from gateway.admission.queue import AdmissionQueue
from gateway.admission.saturation import EndpointLoad
from gateway.config.admission import PRIORITIES, AdmissionSettings
from gateway.observability.metrics import AdmissionMetrics, GatewayMetrics


def _sample(metrics: GatewayMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_free_admissions_are_counted_at_scrape_time() -> None:
    gateway = GatewayMetrics()
    admission = AdmissionMetrics(gateway.registry, PRIORITIES)
    admission.watch_queue(lambda cluster, priority: 0, lambda: ["fast"])
    gateway.before_scrape.append(admission.flush)
    gate = AdmissionGate(lambda: AdmissionSettings(enabled=True), AdmissionQueue(),
                         loads=lambda c: [EndpointLoad(0.0, 4.0, "open")], service_s=lambda c: 1.0, metrics=admission)
    for key in ("a", "a", "b"):
        assert gate.now(Ask("fast", key, known_wait_s=0.0)).decision.reason == "free"
    free = {"cluster": "fast", "action": "admit", "reason": "free"}
    assert _sample(gateway, "kvgate_admission_decisions_total", **free) is None, "the hot path touched a counter"
    text = gateway.exposition().decode()
    assert 'kvgate_admission_decisions_total{action="admit",cluster="fast",reason="free"} 3.0' in text
    assert _sample(gateway, "kvgate_admission_admitted_total", cluster="fast", key="a") == 2.0
    assert 'kvgate_admission_key_share{cluster="fast",key="b"}' in text
    gateway.exposition()
    assert _sample(gateway, "kvgate_admission_decisions_total", **free) == 3.0, "counted twice"


def test_the_tally_flushes_by_itself_every_4096() -> None:
    gateway = GatewayMetrics()
    admission = AdmissionMetrics(gateway.registry, PRIORITIES)
    for _ in range(4096):
        admission.count_free("fast", "a")
    assert _sample(gateway, "kvgate_admission_admitted_total", cluster="fast", key="a") == 4096.0
