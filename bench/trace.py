"""Trace files: the exact requests every policy of a benchmark replays.

A trace is JSON Lines: the first line is a header (``{"trace": 1, "spec": {...}}``: the workload
spec it was generated from), then one request per line, in arrival order::

    {"t": 0.132, "kind": "tenant", "group": "tenant-3", "messages": [...], "max_tokens": 71}

``t`` is the arrival offset in seconds from the start of the replay, ``kind`` the workload shape
(``tenant``, ``session``, ``docqa``, ``cold``), ``group`` the tenant, session or document it
belongs to. Replaying the file (never regenerating) is what makes policies comparable.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

TRACE_VERSION = 1


@dataclass(frozen=True)
class TraceRequest:
    """One chat request of a trace."""

    t: float
    kind: str
    group: str
    messages: tuple[Mapping[str, str], ...]
    max_tokens: int

    def body(self, model: str, *, stream: bool = True) -> dict[str, Any]:
        """The OpenAI chat body to send (usage in the stream, so cached tokens are seen)."""
        body: dict[str, Any] = {"model": model, "messages": list(self.messages),
                                "max_tokens": self.max_tokens, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body


@dataclass(frozen=True)
class Trace:
    """A header (the generating spec) plus the requests in arrival order."""

    spec: Mapping[str, Any]
    requests: tuple[TraceRequest, ...] = field(default_factory=tuple)

    @property
    def duration(self) -> float:
        return self.requests[-1].t if self.requests else 0.0


def save_trace(path: Path, trace: Trace) -> None:
    """Write ``trace`` as JSON Lines (creates parent directories)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as out:
        out.write(json.dumps({"trace": TRACE_VERSION, "spec": dict(trace.spec)}) + "\n")
        for request in trace.requests:
            row = asdict(request)
            row["messages"] = [dict(m) for m in request.messages]
            out.write(json.dumps(row, separators=(",", ":")) + "\n")


def load_trace(path: Path) -> Trace:
    """Read a trace written by :func:`save_trace`; ``ValueError`` on a bad header."""
    with path.open(encoding="utf-8") as lines:
        header = json.loads(next(lines))
        if header.get("trace") != TRACE_VERSION:
            raise ValueError(f"{path}: not a version-{TRACE_VERSION} trace file")
        requests = tuple(_request(json.loads(line)) for line in lines if line.strip())
    return Trace(header.get("spec", {}), requests)


def _request(row: Mapping[str, Any]) -> TraceRequest:
    return TraceRequest(
        t=float(row["t"]), kind=str(row["kind"]), group=str(row["group"]),
        messages=tuple(dict(m) for m in row["messages"]), max_tokens=int(row["max_tokens"]),
    )


def kinds(requests: Iterable[TraceRequest]) -> dict[str, int]:
    """Count of requests per kind."""
    counts: dict[str, int] = {}
    for request in requests:
        counts[request.kind] = counts.get(request.kind, 0) + 1
    return counts


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
