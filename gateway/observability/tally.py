"""Per-request instrument updates folded into the Prometheus instruments at scrape time.

A request's close-out makes about ten instrument updates (``kvgate_requests_total``, the latency
histograms, tokens, route mix, cost). Through prometheus_client each is a child lookup, a lock and,
for a histogram, a Python loop over the buckets: about 1.5-3 us apiece. :class:`Tally` keeps plain
Python numbers instead, keyed by (instrument, label values): one ``dict.get`` and an add per
counter update; for a histogram a ``bisect`` into the bucket bounds and two adds. The numbers are
added into the real instruments (their children's values, the same names, labels and buckets as
``observability/metrics.py`` defines) by :meth:`Tally.flush`, which runs first in every collection
of the registry (the tally is registered on it before any instrument), so ``GET /metrics``,
``registry.collect()`` and ``registry.get_sample_value`` read exactly what direct updates would
have given. Code that reads one instrument's ``collect()`` directly calls :meth:`flush` first.

A gauge that only moves by steps (``kvgate_endpoint_in_flight``: +1 when an attempt takes an
endpoint's slot, -1 when it frees it) is tallied the same way (:meth:`shift`): the steps since
the last collection are summed per label set and added by ``flush``; a label set whose steps
cancel out is still added (``inc(0)``), so its child exists from its first step, as with direct
updates.

One figure that two counters show under different labels (a request's tokens by model and cluster,
and by endpoint) is counted once, into a :class:`Split` keyed by all the labels: the flush adds it to
both, so the request path makes one update for the two.

Under ``kvgate serve --processes N`` (``PROMETHEUS_MULTIPROC_DIR`` set) a scrape reads every
process's values from shared files, so updates cannot wait for this process's scrape: the tally
then writes through (``direct=True``), as before.

Single-threaded by design: updates and flushes run on the event loop's thread.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Metric
from prometheus_client.metrics import MetricWrapperBase  # a Counter or a Histogram (defined in metrics.py)
from prometheus_client.registry import Collector


class _Children:
    __slots__ = ("_children",)

    def __init__(self, children: list[MetricWrapperBase]) -> None:
        self._children = children

    def inc(self, amount: float) -> None:
        for child in self._children:
            child.inc(amount)


class Split:
    """A counter for :meth:`Tally.count` that adds each amount to two counters, each child labelled by
    the key's values at its ``positions``; the ``secondary`` is skipped when one of its labels is empty."""

    __slots__ = ("_primary", "_primary_at", "_secondary", "_secondary_at")

    def __init__(
        self, primary: MetricWrapperBase, primary_at: tuple[int, ...], secondary: MetricWrapperBase, secondary_at: tuple[int, ...]
    ) -> None:
        self._primary, self._primary_at, self._secondary, self._secondary_at = primary, primary_at, secondary, secondary_at

    def labels(self, *values: str) -> _Children:
        children = [self._primary.labels(*(values[i] for i in self._primary_at))]
        secondary = [values[i] for i in self._secondary_at]
        if all(secondary):
            children.append(self._secondary.labels(*secondary))
        return _Children(children)


class Tally(Collector):
    """Pending counter and histogram updates; see the module doc. Registers itself on ``registry``."""

    def __init__(self, registry: CollectorRegistry, *, direct: bool = False) -> None:
        self.direct = direct
        self._counts: dict[tuple[MetricWrapperBase | Split, tuple[str, ...]], float] = {}
        # per (histogram, labels): the histogram's bounds (shared) and one count per bucket, then the sum
        self._histograms: dict[tuple[MetricWrapperBase, tuple[str, ...]], tuple[list[float], list[float]]] = {}
        self._shifts: dict[tuple[MetricWrapperBase, tuple[str, ...]], float] = {}
        self._bounds: dict[MetricWrapperBase, list[float]] = {}
        registry.register(self)

    def count(self, counter: MetricWrapperBase | Split, labels: tuple[str, ...], amount: float = 1.0) -> None:
        """``counter.labels(*labels).inc(amount)``, folded; ``amount`` must be >= 0 (checked at flush)."""
        if self.direct:
            counter.labels(*labels).inc(amount)
            return
        key = (counter, labels)
        counts = self._counts
        counts[key] = counts.get(key, 0.0) + amount

    def shift(self, gauge: MetricWrapperBase, labels: tuple[str, ...], amount: float) -> None:
        """``gauge.labels(*labels).inc(amount)`` (``amount`` of either sign), folded."""
        if self.direct:
            gauge.labels(*labels).inc(amount)
            return
        key = (gauge, labels)
        shifts = self._shifts
        shifts[key] = shifts.get(key, 0.0) + amount

    def observe(self, histogram: MetricWrapperBase, labels: tuple[str, ...], value: float) -> None:
        """``histogram.labels(*labels).observe(value)``, folded (the same bucket: the first bound >= value)."""
        if self.direct:
            histogram.labels(*labels).observe(value)
            return
        key = (histogram, labels)
        entry = self._histograms.get(key)
        if entry is None:
            bounds = self._bounds.get(histogram)
            if bounds is None:
                bounds = self._bounds[histogram] = list(histogram._upper_bounds)  # ends with +Inf
            entry = self._histograms[key] = (bounds, [0.0] * (len(bounds) + 1))  # one per bucket, then the sum
        bounds, row = entry
        row[bisect_left(bounds, value)] += 1
        row[-1] += value

    def flush(self) -> None:
        """Add every pending update into its instrument's child, then forget it."""
        counts, self._counts = self._counts, {}
        for (counter, labels), amount in counts.items():
            counter.labels(*labels).inc(amount)
        histograms, self._histograms = self._histograms, {}
        for (histogram, labels), (_, row) in histograms.items():
            child = histogram.labels(*labels)
            for index, observed in enumerate(row[:-1]):
                if observed:
                    child._buckets[index].inc(observed)
            child._sum.inc(row[-1])
        shifts, self._shifts = self._shifts, {}
        for (gauge, labels), amount in shifts.items():
            gauge.labels(*labels).inc(amount)

    def collect(self) -> Iterator[Metric]:
        """Flush (the registry collects this before the instruments); yields nothing of its own."""
        self.flush()
        return iter(())

    def describe(self) -> Iterator[Metric]:
        return iter(())
