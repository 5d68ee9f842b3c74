"""The scheduling framework's vocabulary: candidates, the per-request context and the plugin seams.

Pipeline of one request (``scheduling/profile.py``): **producers** (async, deadline-bound) fetch
hints, the scheduler turns each endpoint plus the hints into a :class:`Candidate`, **filters**
drop candidates, **scorers** give each survivor a score in [0, 1], the weighted sum ranks them
through one **picker**. Filters, scorers and pickers are pure and synchronous: everything they
read is on the candidate or the context; none keeps state between calls (a picker may keep its
rotation). Every plugin is built once, from the registry (``scheduling/registry.py``), with its
parameters resolved then: nothing per request reads a parameter table.

Hints are typed: a producer's answer is written by the producer itself (:meth:`DataProducer.write`)
into its field of :class:`Hints`; the framework reads those fields, never a hint by name.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import ConfigDict

from gateway.endpoints.metrics_parse import EngineStats
from gateway.config import HotSpotSettings, StrictNumbers
from gateway.endpoints.model import Endpoint
from gateway.prefix.hashing import PrefixKey
from gateway.protocol.openai import InferenceRequest
from gateway.state.base import StoreView


@dataclass(slots=True)
class Candidate:
    """One endpoint as filters and scorers see it.

    Attributes:
        endpoint: the live endpoint (read only).
        stats: its latest engine stats, or None when never scraped or stale.
        in_flight: requests in flight to it from every gateway replica.
        matched: leading blocks of the prompt its prefix index holds.
        affinity: it recently served the request's ``prompt_cache_key``/``user``.
        recent: decayed count of recent assignments by this replica (``bounded-share``).
        latency: EWMA of its seconds per output token, or None before any observation.
        prefill: bytes of prompt sent to it by this replica and not prefilled yet
            (``scheduling/prefill.py``).
        weight: its configured weight (``spec.weight``, read once per decision).
        precise: prompt tokens its engine holds by its KV events (precise mode), or None when
            unknown (no ``tokenize`` hint, or it never published events).
    """

    endpoint: Endpoint
    stats: EngineStats | None = None
    in_flight: int = 0
    matched: int = 0
    affinity: bool = False
    recent: float = 0.0
    latency: float | None = None
    prefill: float = 0.0
    weight: float = 1.0
    precise: int | None = None

    @property
    def name(self) -> str:
        return self.endpoint.spec.name


@dataclass(slots=True)  # made per request, never changed: not frozen (a frozen __init__ costs ~5x)
class Context:
    """What every plugin may read about the request being scheduled."""

    cluster: str
    request: InferenceRequest
    key: PrefixKey
    hot_spot: HotSpotSettings
    prompt_tokens: int | None = None  # the prompt's tokens, when the ``tokenize`` producer answered


class Hints:
    """What the producers found for one request: one typed field per kind of hint.

    Attributes:
        state: the state store's view (prefix matches, affinity, other replicas' in-flight
            counts), or None when no producer gave one (none configured, late or failed).
        precise: the ``tokenize`` producer's view (prompt tokens, exact matches from KV events:
            ``scheduling/tokens.py``), or None.

    ``name in hints`` and ``iter(hints)`` give the names of the producers that answered (the
    explain output lists them); the framework never looks a hint up by that name.
    """

    __slots__ = ("state", "precise", "_produced")

    def __init__(self) -> None:
        self.state: StoreView | None = None
        self.precise: Any = None  # a scheduling.tokens.PreciseView (typed there: it imports this module)
        self._produced: list[str] = []

    def answered(self, name: str) -> None:
        """Producer ``name`` gave its hint (called by the runner after the producer wrote it)."""
        self._produced.append(name)

    def __contains__(self, name: object) -> bool:
        return name in self._produced

    def __iter__(self) -> Iterator[str]:
        return iter(self._produced)

    def __len__(self) -> int:
        return len(self._produced)


class Params(StrictNumbers):
    """A plugin type's parameters (``params`` of ``[[routing.plugins]]``): typed, checked once at build."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class NoParams(Params):
    """A plugin type that takes no parameters."""


class Filter(Protocol):
    """Keeps the candidates that may take the request (the framework never lets it empty the set)."""

    def filter(self, ctx: Context, candidates: list[Candidate]) -> list[Candidate]: ...


class Scorer(Protocol):
    """One score in [0, 1] per candidate, in order (1 = best); the framework clamps to [0, 1]."""

    def score(self, ctx: Context, candidates: Sequence[Candidate]) -> list[float]: ...


class Picker(Protocol):
    """Ranks candidates (indices into ``candidates``, best first) from their weighted totals."""

    def pick(self, ctx: Context, candidates: Sequence[Candidate], totals: Sequence[float]) -> list[int]: ...


PENDING: Any = object()
"""What a producer's optional ``produce_now`` returns when its hint needs I/O (then ``produce`` runs)."""


class DataProducer(Protocol):
    """Fetches one hint for the request (may do I/O); bounded by the profile's deadline.

    ``write(hints, value)`` stores a produced value in its typed field of :class:`Hints`.
    A producer may also define ``produce_now(ctx, endpoints)``: the hint when it is available
    without I/O, else :data:`PENDING`. The runner tries it first (no task, no timer).
    """

    async def produce(self, ctx: Context, endpoints: Sequence[Endpoint]) -> Any: ...

    def write(self, hints: Hints, value: Any) -> None: ...
