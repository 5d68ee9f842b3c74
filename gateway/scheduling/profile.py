"""The profile scheduler: producers -> candidates -> filters -> weighted scorers -> picker.

A profile (``[routing.profiles.NAME]``) names its plugins; ``scheduling/registry.py`` resolves each
name (a declared ``[[routing.plugins]]`` entry or a type with default parameters) and builds the
plugin once, here. Every policy is a profile: ``least-in-flight`` (the ``in-flight`` scorer, ties
in rotating order) and ``round-robin`` (no scorer, rotating order) are built-in profiles with
``closed_loop = false``: the prompt is not hashed, the decision keeps only its ranking (commit and
observe do nothing, no breakdown), as their dedicated schedulers did. For one request,
:meth:`ProfileScheduler.schedule`:

1. splits the cluster's endpoints into routable ones (scored) and ejected ones (appended last,
   unscored, so a cluster whose endpoints all failed checks is still tried); draining ones drop;
2. hashes the prompt (``gateway/prefix/hashing.py``) for the cluster's served model (closed loop
   only);
3. runs the producers under the deadline (``scheduling/producers.py``); each answer lands in its
   typed field of :class:`~gateway.scheduling.types.Hints`, a missing one leaves its default;
4. builds one :class:`~gateway.scheduling.types.Candidate` per routable endpoint (with, in precise
   mode, the exact tokens its engine holds by its KV events: ``Hints.precise``, whose prompt
   token count goes to ``Context.prompt_tokens``): index match (or
   the match with a prompt still being prefilled there, ``scheduling/prefill.py``, if longer) and
   affinity, cluster-wide in-flight (this replica live + other replicas from the store), engine
   stats unless stale, latency EWMA, recent assignments and prefill in flight from the closed loop;
5. scores **every** candidate with every weighted scorer (the breakdown; the framework clamps
   each score to [0, 1]), runs the filters in order (one that would empty the set is ignored)
   and lets the picker rank the survivors by ``sum(weight * score)``; filtered-out candidates
   follow, best total first (failover order). With a single routable candidate there is nothing
   to rank or filter: it is chosen at once (the picker still sees the decision, so a rotation
   advances) and the scores are computed only if the decision is read (explain, tracing): the
   same numbers, ~9 us less per request on a one-endpoint cluster (``bench/gateway_path.py
   --endpoints 1``).

The :class:`ProfileDecision` it returns records the prompt's blocks for the chosen endpoint on
``commit`` and feeds the closed loop on ``observe``; ``explain()`` is what
``POST /admin/routing/explain`` returns.

Cost (``bench/prefix_hashing.py``, CPU time on the 2-core dev machine, 8 KB prompt, 4 endpoints):
about 25 us per decision when the prompt's head was seen before, 35 us when not (48-58 us
before these measures). What keeps it there: one pass splits the endpoints; the prompt hash
reuses memoized heads (``prefix/hashing.py`` step 5); producers that can answer without I/O do
so without a task or a timer (``scheduling/producers.py``); weighted totals are summed per scorer
column; the breakdown and the name-keyed views of the decision are built only when read (the
explain route, tracing), the failover order of filtered-out candidates only when a filter
dropped one, and the picker draws from the generator only on ties.

Long prompts (a body of at least ``[server] heavy_step_bytes``) wait their turn at the app's
:class:`~gateway.turns.TurnGate` before the prefix key and match, and their commit's index insert
runs through it: one such step per event-loop turn (``gateway/turns.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import add
from typing import Any

from gateway.config import ProfileSettings, RoutingSettings
from gateway.endpoints.model import Endpoint
from gateway.endpoints.stats import StatsBoard
from gateway.prefix.hashing import PrefixKey, PromptHasher
from gateway.protocol.openai import InferenceRequest
from gateway.scheduling import registry
from gateway.scheduling.decision_record import DecisionRecord, endpoint_row
from gateway.scheduling.feedback import PrefixFeedback
from gateway.observability.metrics import RoutingMetrics
from gateway.scheduling.producers import gather_hints
from gateway.scheduling.registry import UnknownPluginError  # noqa: F401  (re-exported: profiles raise it)
from gateway.scheduling.scheduler import Decision
from gateway.scheduling.types import Candidate, Context, DataProducer, Filter, Hints, Picker, Scorer
from gateway.state.base import StoreView
from gateway.turns import TurnGate


def _clamped(scores: Sequence[float]) -> list[float]:
    """Every score in [0, 1] (NaN counts as 0; a NaN is caught when it is a column's min, e.g. first)."""
    return [s if 0.0 <= s <= 1.0 else (1.0 if s > 1.0 else 0.0) for s in scores]


_LONE = (0.0,)
"""The totals a picker sees for a lone candidate (chosen unscored)."""


Scores = tuple[list[tuple[str, Sequence[float]]], list[float], float]
"""Each scorer's column, the weighted totals that can differ, and the constant columns' share."""


class _Breakdown(Mapping[str, Mapping[str, float]]):
    """Per endpoint, per scorer, the score: built on first read (most requests never read it)."""

    __slots__ = ("_candidates", "_scores", "_table")

    def __init__(self, candidates: Sequence[Candidate], scores: Scores | Callable[[], Scores]) -> None:
        self._candidates = candidates
        self._scores = scores  # or what computes them (no reference back to the decision: no cycle)
        self._table: dict[str, dict[str, float]] | None = None

    def scores(self) -> Scores:
        scores = self._scores
        if callable(scores):
            scores = self._scores = scores()
        return scores

    def computed(self) -> Scores | None:
        """The scores if scheduling (or a reader) computed them, else None (nothing is computed here)."""
        scores = self._scores
        return None if callable(scores) else scores

    def _built(self) -> dict[str, dict[str, float]]:
        table = self._table
        if table is None:
            columns = self.scores()[0]
            table = self._table = {
                c.name: {scorer: scores[i] for scorer, scores in columns} for i, c in enumerate(self._candidates)
            }
        return table

    def __getitem__(self, name: str) -> dict[str, float]:
        return self._built()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._built())

    def __len__(self) -> int:
        return len(self._candidates)


class ProfileDecision(Decision):
    """A decision that commits prefixes and closes the loop (see the module docstring)."""

    def __init__(
        self, owner: ProfileScheduler, ranked: list[Endpoint], key: PrefixKey, candidates: Sequence[Candidate],
        scores: Scores | Callable[[], Scores], filtered: Sequence[str],
        hints: Hints, cluster: str, first: Candidate,
    ) -> None:
        self.ranked = ranked
        self.breakdown = _Breakdown(candidates, scores)
        self.key = key
        self._candidates = candidates
        self.filtered = filtered
        self.hints = hints
        self._first = first
        self.profile = owner.name
        self.cluster = cluster
        self._store = owner.store
        self._feedback = owner.feedback
        self._clock = clock = owner.clock
        self._hot_spot = owner.hot_spot
        self._turns = owner.turns
        self._started = now = clock()
        # the first-ranked endpoint is the one tried: its prefill in flight grows until commit
        uncached = key.length - first.matched * key.block_bytes
        self._ticket = owner.feedback.prefill.expect(first.name, uncached if uncached > 0 else 0, key.blocks, now)
        self.predicted_cached: int | None = None  # set by commit: the cached tokens predicted where it went

    @property
    def candidates(self) -> dict[str, Candidate]:
        """Routable candidates by endpoint name."""
        return {c.name: c for c in self._candidates}

    def scores(self) -> Scores:
        """The scorers' columns and totals (computed here, once, when scheduling left them out)."""
        return self.breakdown.scores()

    @property
    def totals(self) -> dict[str, float]:
        """Weighted total per routable endpoint name."""
        _, totals, offset = self.scores()
        return {c.name: total + offset for c, total in zip(self._candidates, totals, strict=True)}

    def _candidate(self, name: str) -> Candidate | None:
        """The routable candidate of endpoint ``name`` (usually the first-ranked: the one tried), or None."""
        first = self._first
        if first.name == name:
            return first
        return next((c for c in self._candidates if c.name == name), None)

    def predicted(self, name: str) -> int:
        """Cached tokens ``name`` should report: exact by its KV events when known, else the index's guess."""
        candidate = self._candidate(name)
        if candidate is not None and candidate.precise is not None:
            return candidate.precise
        return self._approximate(candidate)

    def _approximate(self, candidate: Candidate | None) -> int:
        return 0 if candidate is None else self._feedback.predict(candidate.name, candidate.matched, self.key)

    def commit(self, endpoint: Endpoint) -> None:
        self._feedback.prefill.settle(self._ticket)  # headers came with the first token: prefilled
        name = endpoint.spec.name
        candidate = self._candidate(name)
        # the counters' check judges the byte index (its capacity scale), so it gets the index's guess
        approximate = self._approximate(candidate)
        precise = candidate.precise if candidate is not None else None
        self.predicted_cached = approximate if precise is None else precise  # what predicted(name) gives
        turns = self._turns
        key = self.key
        if turns is not None and key.length >= turns.min_bytes:
            turns.defer(len(key.blocks) * key.block_bytes, self._store.record, name, key)  # a long prompt's insert: heavy work bounded per loop turn
        else:
            self._store.record(name, key)
        self._feedback.committed(name, approximate)

    def observe(self, endpoint: Endpoint, usage: Mapping[str, Any] | None) -> None:
        self._feedback.prefill.settle(self._ticket)
        name = endpoint.spec.name
        candidate = self._candidate(name)
        state = self.hints.state
        indexed = 0 if state is None else state.matched.get(name, 0)
        # the closed loop judges the index; a match with a prompt still prefilling at scheduling
        # time may or may not have been cached when the engine admitted this one: not judged
        judge = candidate is None or candidate.matched <= indexed
        self._feedback.observe(name, self.key, indexed, usage, self._clock() - self._started, judge=judge)

    def record(self) -> DecisionRecord:
        """What the per-request record keeps of this decision (``scheduling/decision_record.py``): no prompt."""
        return DecisionRecord(
            self.profile, self.cluster, self.ranked, self._candidates, self.breakdown.computed(),
            self.filtered, self.hints, self.key, self._feedback, self.predicted_cached, self._hot_spot,
        )

    def explain(self) -> dict[str, Any]:
        """The decision as JSON-ready data (admin explain route: nothing is sent, nothing stays pending)."""
        self._feedback.prefill.settle(self._ticket)
        state = self.hints.state
        candidates = self.candidates
        totals = self.totals
        endpoints = []
        for endpoint in self.ranked:
            name = endpoint.spec.name
            c = candidates.get(name)
            endpoints.append(endpoint_row(
                name, c, totals.get(name), self.breakdown.get(name, {}), name in self.filtered,
                self.predicted(name), self._hot_spot,
            ))
        return {
            "profile": self.profile,
            "cluster": self.cluster,
            "ranked": [e.spec.name for e in self.ranked],
            "prompt": {"bytes": self.key.length, "blocks": len(self.key.blocks), "block_bytes": self.key.block_bytes,
                       "affinity_key": self.key.affinity is not None},
            "hints": sorted(self.hints),
            "state_degraded": None if state is None else bool(state.degraded),
            "endpoints": endpoints,
        }


def _split(endpoints: Sequence[Endpoint]) -> tuple[list[Endpoint], list[Endpoint]]:
    """(routable, ejected) in one pass; draining endpoints are in neither: they take no new requests."""
    routable: list[Endpoint] = []
    ejected: list[Endpoint] = []
    for endpoint in endpoints:
        if endpoint.routable:
            routable.append(endpoint)
        elif not endpoint.draining:
            ejected.append(endpoint)
    return routable, ejected


class ProfileScheduler:
    """Schedules with one profile (see the module docstring).

    Plugins are resolved and built here, once (``routing.plugins`` plus the built-in ones, from
    ``types``: the registry's :data:`~gateway.scheduling.registry.PLUGINS` unless a test or an
    extension passes its own table). Raises :class:`~gateway.config.ConfigError` (an unknown
    type or name, a plugin of the wrong kind, bad parameters), naming it.
    """

    def __init__(
        self, name: str, profile: ProfileSettings, routing: RoutingSettings, deps: registry.PluginDeps, *,
        hasher: PromptHasher, board: StatsBoard, feedback: PrefixFeedback, metrics: RoutingMetrics,
        clock: Callable[[], float], types: Mapping[str, registry.PluginType] = registry.PLUGINS,
    ) -> None:
        self.name = name
        declared = registry.declare(routing.all_plugins(), types)

        def built(ref: str, kind: registry.Kind) -> Any:
            return registry.resolve(declared, ref, kind, name, types).make(deps)

        self._producers: dict[str, DataProducer] = {ref: built(ref, "producer") for ref in profile.producers}
        self._filters: list[Filter] = [built(ref, "filter") for ref in profile.filters]
        self._scorers: list[tuple[str, Scorer, float]] = [
            (ref, built(ref, "scorer"), weight) for ref, weight in profile.scorers.items()
        ]
        self._picker: Picker = built(profile.picker, "picker")
        self.closed_loop = profile.closed_loop
        self.hot_spot = routing.hot_spot
        self._deadline = routing.producer_deadline_ms / 1000
        self._stale_after = routing.scrape.stale_after_s
        self._hasher = hasher
        self._no_key = PrefixKey((), None, 0, routing.index.block_bytes)  # what an open-loop profile hashes
        self._board = board
        self.feedback = feedback
        self._metrics = metrics
        self.store = deps.store
        self.clock = clock
        self.turns: TurnGate | None = None  # long prompts' heavy steps, one per loop turn (the app sets it; None: never wait)

    async def schedule(self, endpoints: Sequence[Endpoint], request: InferenceRequest) -> Decision:
        routable, ejected = _split(endpoints)
        if not routable:
            return Decision(ejected)
        turns = self.turns
        if turns is not None and len(request.raw) >= turns.min_bytes and self.closed_loop:
            await turns.turn(len(request.raw))  # the prefix key and match of a long prompt: heavy work bounded per loop turn
        ctx = self._context(routable, request)
        producers = self._producers
        hints = await gather_hints(producers, ctx, routable, self._deadline, self._metrics) if producers else Hints()
        candidates = self._candidates(routable, hints.state, ctx.key)
        precise = hints.precise
        if precise is not None:  # precise mode: exact matches by KV events (scheduling/tokens.py)
            ctx.prompt_tokens = precise.tokens
            held = precise.matched
            for c in candidates:
                c.precise = held.get(c.name)
        first, ranked, filtered, scores = self._order(ctx, candidates)
        if ejected:
            ranked += ejected
        if not self.closed_loop:
            return Decision(ranked)
        return ProfileDecision(self, ranked, ctx.key, candidates, scores, filtered, hints, ctx.cluster, first)

    def rank(self, endpoints: Sequence[Endpoint], request: InferenceRequest) -> list[Endpoint]:
        """The ranking ``schedule`` gives when no producer answers: synchronous, nothing recorded."""
        routable, ejected = _split(endpoints)
        if not routable:
            return ejected
        ctx = self._context(routable, request)
        ranked = self._order(ctx, self._candidates(routable, None, ctx.key))[1]
        return ranked + ejected

    def _context(self, routable: Sequence[Endpoint], request: InferenceRequest) -> Context:
        spec = routable[0].spec
        key = self._hasher.key(request, spec.served_model) if self.closed_loop else self._no_key
        return Context(spec.cluster, request, key, self.hot_spot)

    def _order(
        self, ctx: Context, candidates: list[Candidate],
    ) -> tuple[Candidate, list[Endpoint], list[str], Scores | Callable[[], Scores]]:
        """(first, ranked routable endpoints, filtered-out names, the scores or what computes them)."""
        count = len(candidates)
        if count == 1:  # nothing to rank or filter: the scores are computed only if they are read
            self._picker.pick(ctx, candidates, _LONE)  # the picker sees every decision (a rotation advances)
            first = candidates[0]
            return first, [first.endpoint], [], lambda: self._score(ctx, candidates)
        scores = self._score(ctx, candidates)
        totals = scores[1]
        survivors = candidates
        for flt in self._filters:
            survivors = flt.filter(ctx, survivors) or survivors
        if len(survivors) == count:  # the usual case: nothing filtered out
            order = self._picker.pick(ctx, candidates, totals)
            return candidates[order[0]], [candidates[i].endpoint for i in order], [], scores
        first, ranked, filtered = self._rank_filtered(ctx, candidates, survivors, totals)
        return first, ranked, filtered, scores

    def _score(self, ctx: Context, candidates: list[Candidate]) -> Scores:
        """Every scorer's column; weighted totals summed per column (a constant column goes to the offset)."""
        count = len(candidates)
        columns: list[tuple[str, Sequence[float]]] = []
        totals = [0.0] * count
        offset = 0.0  # the constant columns' share of every total
        for scorer_name, scorer, weight in self._scorers:
            scores = scorer.score(ctx, candidates)
            low = min(scores)
            high = max(scores)
            if not (0.0 <= low and high <= 1.0):  # the framework's bound, whatever the plugin returns
                scores = _clamped(scores)
                low = min(scores)
                high = max(scores)
            columns.append((scorer_name, scores))
            if not weight:
                continue
            if low == high:  # a constant column cannot change the ranking
                offset += weight * low
            else:
                totals = list(map(add, totals, map(weight.__mul__, scores)))
        return columns, totals, offset

    def _rank_filtered(
        self, ctx: Context, candidates: list[Candidate], survivors: list[Candidate], totals: list[float],
    ) -> tuple[Candidate, list[Endpoint], list[str]]:
        """Survivors ranked by the picker, then the filtered-out candidates, best total first."""
        position = {id(c): i for i, c in enumerate(candidates)}
        order = self._picker.pick(ctx, survivors, [totals[position[id(c)]] for c in survivors])
        kept = {id(c) for c in survivors}
        dropped = sorted((c for c in candidates if id(c) not in kept), key=lambda c: -totals[position[id(c)]])
        best = max(candidates, key=lambda c: c.matched)
        if best.matched > 0 and id(best) not in kept and all(c.matched < best.matched for c in survivors):
            self._metrics.hot_spot_diversions.labels(ctx.cluster).inc()
        ranked = [survivors[i].endpoint for i in order] + [c.endpoint for c in dropped]
        return survivors[order[0]], ranked, [c.name for c in dropped]

    def _candidates(self, endpoints: Sequence[Endpoint], view: StoreView | None, key: PrefixKey) -> list[Candidate]:
        now = self.clock()
        fresh = self._board.fresh
        stale_after = self._stale_after
        recent = self.feedback.recent.get
        latency = self.feedback.latency.get
        tracker = self.feedback.prefill
        prefill = tracker.pending.get
        if view is None:
            matched: Mapping[str, int] = {}
            affinity: frozenset[str] = frozenset()
            remote: Mapping[str, int] = {}
        else:
            matched, affinity, remote = view.matched, view.affinity, view.remote_in_flight
        out = []
        for endpoint in endpoints:
            spec = endpoint.spec
            name = spec.name
            scrape = fresh(name, now, stale_after)
            stats = scrape.stats if scrape is not None else None
            in_flight = endpoint.in_flight + remote[name] if name in remote else endpoint.in_flight
            work = prefill(name, 0.0)
            blocks = matched.get(name, 0)
            if work:  # prompts in flight there: their blocks are about to be cached
                blocks = max(blocks, tracker.match(name, key.blocks))
            out.append(Candidate(
                endpoint, stats, in_flight, blocks, name in affinity, recent(name, 0.0), latency(name), work, spec.weight,
            ))
        return out
