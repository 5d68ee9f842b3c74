"""A scheduling decision kept after its request ended, for the per-request record's explanation.

:meth:`ProfileDecision.record <gateway.scheduling.profile.ProfileDecision.record>` builds one
:class:`DecisionRecord` when a request's close-out runs (``gateway/observability/request_log.py``).
It references what scheduling already built, copies nothing and computes nothing:

* the candidates (endpoint, engine stats, in-flight, matched blocks, affinity) as they were;
* the scorers' columns, weighted totals and constant offset **if scheduling computed them**: with
  a single routable endpoint the profile chose it without scoring (``scheduling/profile.py`` step 5),
  and the record says so (``scored: false``) instead of scoring after the fact;
* the filtered-out names, the ranked endpoints, the producers' hints, the prompt's size in bytes
  and blocks (never the prompt or its hashes), and the predicted cached tokens of the endpoint
  it committed to.

:meth:`DecisionRecord.render` gives the shape of ``POST /admin/routing/explain``
(``decision.explain()``), so the console shows a recorded request and a dry run the same way.
Predicted cached tokens of the endpoints not chosen use the closed loop's estimates at read
time (``scheduling/feedback.py``); the chosen one's is the figure committed with the request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.config import HotSpotSettings
from gateway.endpoints.model import Endpoint
from gateway.prefix.hashing import PrefixKey
from gateway.scheduling.filters import loaded
from gateway.scheduling.types import Candidate, Hints


def endpoint_row(
    name: str, c: Candidate | None, total: float | None, scores: Mapping[str, float], filtered: bool,
    predicted_cached: int | None, hot_spot: HotSpotSettings,
) -> dict[str, Any]:
    """One endpoint of an explanation (``explain()`` and a recorded decision render the same rows)."""
    stats = None if c is None else c.stats
    return {
        "name": name,
        "total": total,
        "scores": scores,
        "filtered": filtered,
        "routable": c is not None,
        "matched_blocks": None if c is None else c.matched,
        "predicted_cached_tokens": predicted_cached,
        "affinity": None if c is None else c.affinity,
        "in_flight": None if c is None else c.in_flight,
        "stale_stats": stats is None,
        "waiting": None if stats is None else stats.waiting,
        "kv_usage": None if stats is None else stats.kv_usage,
        "loaded": None if c is None else loaded(c, hot_spot),
    }


class DecisionRecord:
    """See the module docstring. Built once per request; rendered only when read."""

    __slots__ = ("profile", "cluster", "ranked", "candidates", "scores", "filtered", "hints", "prompt", "feedback",
                 "predicted_cached", "hot_spot")

    # One field per argument: the record of one decision, built in one place (profile.py); a record, not an API.
    def __init__(  # noqa: PLR0913
        self, profile: str, cluster: str, ranked: Sequence[Endpoint], candidates: Sequence[Candidate],
        scores: Any, filtered: Sequence[str], hints: Hints, key: PrefixKey, feedback: Any,
        predicted_cached: int | None, hot_spot: HotSpotSettings,
    ) -> None:
        self.profile = profile
        self.cluster = cluster
        self.ranked = ranked
        self.candidates = candidates
        self.scores = scores  # (columns, totals, offset) or None when scheduling did not score
        self.filtered = filtered
        self.hints = hints
        self.prompt = (key.length, len(key.blocks), key.block_bytes, key.affinity is not None)
        self.feedback = feedback
        self.predicted_cached = predicted_cached
        self.hot_spot = hot_spot

    def _predicted(self, candidate: Candidate, chosen: str | None) -> int:
        if candidate.name == chosen and self.predicted_cached is not None:
            return self.predicted_cached
        length, _, block_bytes, _ = self.prompt
        return self.feedback.predict(candidate.name, candidate.matched, PrefixKey((), None, length, block_bytes))

    def render(self) -> dict[str, Any]:
        """JSON-ready, as ``decision.explain()`` plus ``scored`` (False: chosen without scoring)."""
        by_name = {c.name: (i, c) for i, c in enumerate(self.candidates)}
        columns, totals, offset = self.scores if self.scores is not None else ([], None, 0.0)
        chosen = self.ranked[0].spec.name if self.ranked else None
        endpoints = []
        for endpoint in self.ranked:
            name = endpoint.spec.name
            index, c = by_name.get(name, (None, None))
            scored = c is not None and totals is not None
            endpoints.append(endpoint_row(
                name, c, totals[index] + offset if scored else None,
                {scorer: column[index] for scorer, column in columns} if scored else {},
                name in self.filtered, None if c is None else self._predicted(c, chosen), self.hot_spot,
            ))
        length, blocks, block_bytes, affinity = self.prompt
        state = self.hints.state
        return {
            "profile": self.profile,
            "cluster": self.cluster,
            "scored": self.scores is not None,
            "ranked": [e.spec.name for e in self.ranked],
            "prompt": {"bytes": length, "blocks": blocks, "block_bytes": block_bytes, "affinity_key": affinity},
            "hints": sorted(self.hints),
            "state_degraded": None if state is None else bool(state.degraded),
            "endpoints": endpoints,
        }
