"""The tally (``gateway/observability/tally.py``): folded updates read back exactly as direct ones.

Two registries with the same instruments, one updated through a :class:`Tally`, one directly;
every collection must give the same samples (bucket edges included), and a flush must not count twice.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from gateway.observability.tally import Split, Tally

BUCKETS = (0.005, 0.01, 0.1, 1.0)
VALUES = (0.0, 0.005, 0.0050001, 0.01, 0.05, 0.1, 1.0, 1.5, 30.0, -1.0)


def _pair(direct: bool = False) -> tuple[CollectorRegistry, Tally, Counter, Histogram]:
    registry = CollectorRegistry(auto_describe=True)
    tally = Tally(registry, direct=direct)
    counter = Counter("t_requests", "requests", ["model", "outcome"], registry=registry)
    histogram = Histogram("t_duration_seconds", "duration", ["model"], buckets=BUCKETS, registry=registry)
    return registry, tally, counter, histogram


def _samples(registry: CollectorRegistry) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    return sorted(
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for family in registry.collect() for s in family.samples if not s.name.endswith("_created")
    )


def test_folded_updates_read_as_direct_ones_at_every_collection() -> None:
    folded, tally, counter, histogram = _pair()
    direct, _, d_counter, d_histogram = _pair()
    for round_ in range(2):
        for index, value in enumerate(VALUES):
            labels = ("m", "success" if index % 3 else "upstream_error")
            tally.count(counter, labels)
            d_counter.labels(*labels).inc()
            tally.count(counter, ("m", "success"), 2.5)
            d_counter.labels("m", "success").inc(2.5)
            tally.observe(histogram, (f"m{index % 2}",), value)
            d_histogram.labels(f"m{index % 2}").observe(value)
        assert _samples(folded) == _samples(direct), f"round {round_}"
        assert _samples(folded) == _samples(direct)  # a second collection adds nothing
    assert folded.get_sample_value("t_requests_total", {"model": "m", "outcome": "success"}) == (
        direct.get_sample_value("t_requests_total", {"model": "m", "outcome": "success"})
    )


def test_direct_mode_writes_through() -> None:
    _, tally, counter, histogram = _pair(direct=True)
    tally.count(counter, ("m", "success"))
    tally.observe(histogram, ("m",), 0.05)
    assert counter.labels("m", "success")._value.get() == 1  # no collection needed
    assert histogram.labels("m")._sum.get() == 0.05


def test_gauge_steps_read_as_direct_ones_at_every_collection() -> None:
    """``shift``: the in-flight gauge's +1/-1 steps folded; a label set whose steps cancel out still shows 0."""
    from prometheus_client import Gauge

    registries = []
    for _ in range(2):
        registry = CollectorRegistry(auto_describe=True)
        registries.append((registry, Tally(registry), Gauge("t_in_flight", "in flight", ["endpoint"], registry=registry)))
    (folded, tally, gauge), (direct, _, d_gauge) = registries
    steps = [("a", 1.0), ("b", 1.0), ("a", 1.0), ("a", -1.0), ("b", -1.0), ("c", 1.0), ("c", -1.0)]
    for round_ in range(3):
        for name, step in steps[round_:]:
            tally.shift(gauge, (name,), step)
            d_gauge.labels(name).inc(step)
        assert _samples(folded) == _samples(direct), f"round {round_}"
        assert _samples(folded) == _samples(direct)  # a second collection adds nothing
    assert folded.get_sample_value("t_in_flight", {"endpoint": "c"}) == 0.0  # its child exists, at 0


def test_direct_mode_shifts_through() -> None:
    from prometheus_client import Gauge

    registry = CollectorRegistry(auto_describe=True)
    tally = Tally(registry, direct=True)
    gauge = Gauge("t_in_flight", "in flight", ["endpoint"], registry=registry)
    tally.shift(gauge, ("a",), 1.0)
    assert gauge.labels("a")._value.get() == 1.0  # no collection needed


def test_a_split_count_lands_in_both_counters_and_skips_an_empty_secondary_label() -> None:
    """One count keyed (model, cluster, endpoint, kind) adds to the by-model counter and the by-endpoint one."""
    for direct in (False, True):
        registry = CollectorRegistry(auto_describe=True)
        tally = Tally(registry, direct=direct)
        by_model = Counter("t_tokens", "tokens", ["model", "cluster", "kind"], registry=registry)
        by_endpoint = Counter("t_endpoint_tokens", "tokens", ["endpoint", "kind"], registry=registry)
        split = Split(by_model, (0, 1, 3), by_endpoint, (2, 3))
        tally.count(split, ("m", "c", "e1", "prompt"), 7)
        tally.count(split, ("m", "c", "e2", "prompt"), 5)
        tally.count(split, ("m", "c", "", "prompt"), 2)  # no endpoint: the by-model counter only
        for _ in range(2):  # a second collection adds nothing
            assert registry.get_sample_value("t_tokens_total", {"model": "m", "cluster": "c", "kind": "prompt"}) == 14
            got = {e: registry.get_sample_value("t_endpoint_tokens_total", {"endpoint": e, "kind": "prompt"}) for e in ("e1", "e2", "")}
            assert got == {"e1": 7, "e2": 5, "": None}, direct
