"""Fault injection for the simulated worker: what can go wrong, and when it fires.

A fault is written as ``KIND[:key=value,...]``, the same in the per-request header
(``x-sim-fault``), the admin endpoint (``POST /admin/faults {"spec": ...}``) and ``--fault``.
Kinds (what a client sees), with their keys:

- ``error`` (``status=500``, ``message``): that status with an OpenAI error body, before headers.
- ``rate-limit`` (``retry_after=1``): 429 with ``Retry-After`` and an error body.
- ``hang-before-headers`` (``seconds``, default: until the client leaves): no status line at all.
- ``hang-after`` (``tokens=1``, ``seconds``): N tokens are sent, then the stream stalls.
- ``drop-after`` (``tokens=1``): N tokens are sent, then the TCP connection is cut.
- ``slow-first-token`` (``seconds=2``): the first token is held back that long.
- ``stream-error`` (``tokens=1``, ``status=500``): after N tokens a 200 stream carries
  ``data: {"error": {...}}`` then ``data: [DONE]`` (vLLM's behaviour when its engine dies).
- ``malformed-sse`` (``tokens=1``): after N tokens one event is truncated JSON; the stream goes on.
- ``stuck`` (worker-wide only): the engine stops stepping while ``/health`` keeps answering 200.
- ``unhealthy`` (worker-wide only): ``/health`` answers 503; generation is unaffected.

Every kind also takes ``p`` (probability, default 1) and ``count`` (how many times a worker-wide
fault fires before it is used up; default unlimited). A per-request header fault always fires.
Worker-wide request faults are tried in the order they were added; the first that fires wins.
Randomness comes from the ``random.Random`` given to :class:`FaultInjector` (seeded by the worker).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

FAULT_HEADER = "x-sim-fault"

REQUEST_KINDS = frozenset({
    "error", "rate-limit", "hang-before-headers", "hang-after", "drop-after", "slow-first-token",
    "stream-error", "malformed-sse",
})
WORKER_KINDS = frozenset({"stuck", "unhealthy"})
_INT_KEYS = {"status", "tokens", "count"}
_FLOAT_KEYS = {"retry_after", "seconds", "p"}
_DEFAULT_SECONDS = {"slow-first-token": 2.0}
_DEFAULT_TOKENS = {"hang-after": 1, "drop-after": 1, "stream-error": 1, "malformed-sse": 1}


class FaultSpecError(ValueError):
    """A fault spec that cannot be parsed."""


@dataclass(frozen=True)
class Fault:
    """One parsed fault (see the module docstring for the meaning of each field)."""

    kind: str
    status: int = 500
    message: str = "simulated failure"
    retry_after: float = 1.0
    tokens: int = 0
    seconds: float | None = None
    p: float = 1.0
    count: int | None = None

    @property
    def spec(self) -> str:
        """A spec string that parses back to this fault."""
        fields = {"status": self.status, "message": self.message, "retry_after": self.retry_after,
                  "tokens": self.tokens, "seconds": self.seconds, "p": self.p, "count": self.count}
        default = parse_fault(self.kind)
        keys = [f"{k}={v}" for k, v in fields.items() if getattr(default, k) != v]
        return self.kind + (":" + ",".join(keys) if keys else "")

    @property
    def worker_wide(self) -> bool:
        return self.kind in WORKER_KINDS


def parse_fault(spec: str) -> Fault:
    """Parse ``KIND[:key=value,...]``; raises :class:`FaultSpecError`."""
    kind, _, rest = spec.strip().partition(":")
    if kind not in REQUEST_KINDS | WORKER_KINDS:
        known = ", ".join(sorted(REQUEST_KINDS | WORKER_KINDS))
        raise FaultSpecError(f"unknown fault kind {kind!r}; known: {known}")
    values: dict[str, object] = {}
    if kind in _DEFAULT_SECONDS:
        values["seconds"] = _DEFAULT_SECONDS[kind]
    if kind in _DEFAULT_TOKENS:
        values["tokens"] = _DEFAULT_TOKENS[kind]
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, raw = item.partition("=")
        if not sep:
            raise FaultSpecError(f"fault parameter {item!r} is not key=value")
        values[key] = _convert(key, raw)
    return Fault(kind, **values)  # type: ignore[arg-type]


def _convert(key: str, raw: str) -> object:
    try:
        if key in _INT_KEYS:
            return int(raw)
        if key in _FLOAT_KEYS:
            return float(raw)
    except ValueError:
        raise FaultSpecError(f"fault parameter {key}={raw!r} is not a number") from None
    if key == "message":
        return raw
    raise FaultSpecError(f"unknown fault parameter {key!r}")


class FaultInjector:
    """Worker-wide fault rules plus the per-request header; decides which fault a request gets."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._rules: list[Fault] = []

    @property
    def rules(self) -> tuple[Fault, ...]:
        return tuple(self._rules)

    def add(self, fault: Fault) -> None:
        self._rules.append(fault)

    def clear(self) -> None:
        self._rules.clear()

    def active(self, kind: str) -> bool:
        """True if a worker-wide state fault (``stuck``, ``unhealthy``) is set."""
        return any(rule.kind == kind for rule in self._rules)

    def pick(self, header: str | None) -> Fault | None:
        """The fault for one request: the header's if given, else the first rule that fires."""
        if header:
            return parse_fault(header)
        for index, rule in enumerate(self._rules):
            if rule.worker_wide or self._rng.random() >= rule.p:
                continue
            if rule.count is not None:
                if rule.count <= 1:
                    del self._rules[index]
                else:
                    self._rules[index] = replace(rule, count=rule.count - 1)
            return rule
        return None
