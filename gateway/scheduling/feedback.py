"""The closed loop: predicted vs reported cached prefix, index capacity, and per-endpoint signals.

No peer router checks its cache model against the engine. This module does, per endpoint:

- **Prediction.** ``predict`` turns the index's matched blocks into tokens:
  ``matched * block_bytes / bytes_per_token``, rounded down to whole engine blocks (vLLM counts
  hits in whole blocks: 128 tokens on vLLM-CPU, 16 on GPUs) and capped at the prompt's last
  whole block before its final token (the last token is always recomputed).
- **Bytes per token.** Every answer's ``prompt_tokens`` refines the endpoint's ratio as a running
  estimate weighted by tokens: ``sum(bytes) / sum(tokens)`` over its prompts, with the configured
  ``index.bytes_per_token`` counted as ``PRIOR_TOKENS`` (1,024) tokens of evidence, so one tiny
  prompt moves it by a little and real prompts soon dominate (an EWMA seeded by the first reading,
  as first built, let one 20-token prompt cut an index's capacity from 728 to 96 blocks). The
  sums keep at most ``WINDOW_TOKENS`` (262,144) tokens of evidence, scaled down beyond, so the
  estimate follows a change in the traffic's mix.
- **Correction from usage.** When the answer reports ``prompt_tokens_details.cached_tokens``,
  the index's matched blocks are converted to tokens again with *this
  request's* ratio, so the comparison judges the index and not the ratio's drift between
  request shapes. The tolerance is what the two granularities allow: one engine block, plus one
  index block in tokens (about 50 for 256 bytes), plus 2% of the prediction (template tokens).
  A prediction **over** the report by more means the engine evicted what the index still holds:
  the index's capacity scale shrinks by 10% (floor ``index.min_scale``), evicting its least
  recent entries, which is what the engine's LRU evicted; **under** means the index forgot
  blocks the engine kept: the scale grows by 5% (cap ``index.max_scale``). (A tolerance of one
  engine block, as first built, judged rounding noise as evictions; since a shrink is twice a
  growth, the noise alone drove the scale to a fraction of the real capacity: on the
  multi-tenant testbed, 15-60% of it, and 5 points of hit rate lost.) The outcome is counted
  (``kvgate_prefix_predictions_total``) and the accuracy ``1 - |pred - reported| / prompt``
  kept as an EWMA (``kvgate_prefix_prediction_accuracy{source="usage"}``).
- **Correction from counters.** Engines that do not report ``cached_tokens`` still export
  ``vllm:prefix_cache_hits_total``: each scrape compares its increase with the tokens predicted
  for requests committed since the previous scrape (``source="counters"``).
- **Capacity.** ``capacity_blocks = kv_capacity_tokens * bytes_per_token / block_bytes * scale``
  from ``vllm:cache_config_info`` (FP8 doubles it), ``index.default_capacity_tokens`` until
  reported, at most ``index.max_blocks_per_endpoint``; re-applied to the store when it moves by
  more than 5%. A restart resets the endpoint's loop and clears its index.
- **Other signals.** Latency EWMA (seconds per output token) for the ``latency`` scorer, the
  decayed recent-assignment counts of ``bounded-share`` and ``assignments``, and the prefill in
  flight (``scheduling/prefill.py``) of the ``prefill`` scorer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from gateway.endpoints.stats import Scrape
from gateway.prefix.hashing import PrefixKey
from gateway.config import IndexSettings
from gateway.observability.metrics import RoutingMetrics
from gateway.scheduling.prefill import PrefillTracker
from gateway.state.base import StateStore

ALPHA = 0.2
PRIOR_TOKENS = 1024.0
WINDOW_TOKENS = 262_144.0
SHRINK = 0.9
GROW = 1.05
TOLERANCE = 0.02


def _ewma(old: float | None, new: float) -> float:
    return new if old is None else old + ALPHA * (new - old)


class PrefixFeedback:
    """Per-endpoint closed-loop state (see the module docstring). Event-loop only."""

    def __init__(self, settings: IndexSettings, store: StateStore, metrics: RoutingMetrics, share_half_life: float) -> None:
        self._settings = settings
        self._store = store
        self._metrics = metrics
        self._decay = 0.5 ** (1.0 / share_half_life)
        self._bytes_per_token: dict[str, float] = {}
        self._ratio_sums: dict[str, tuple[float, float]] = {}  # (bytes, tokens) seen, prior included
        self._scale: dict[str, float] = {}
        self._capacity_tokens: dict[str, int] = {}
        self._block_tokens: dict[str, int] = {}
        self._applied: dict[str, int] = {}
        self._accuracy: dict[tuple[str, str], float] = {}
        self._window: dict[str, float] = {}
        self._counters: dict[str, tuple[float, float]] = {}
        self.latency: dict[str, float] = {}
        self.recent: dict[str, float] = {}
        self.prefill = PrefillTracker()

    # -- prediction ------------------------------------------------------------------------------
    def bytes_per_token(self, name: str) -> float:
        return self._bytes_per_token.get(name, self._settings.bytes_per_token)

    def block_tokens(self, name: str) -> int:
        return self._block_tokens.get(name, self._settings.default_block_tokens)

    def predict(self, name: str, matched: int, key: PrefixKey) -> int:
        """Cached tokens the endpoint should report for this prompt, given ``matched`` blocks."""
        if matched <= 0:
            return 0
        bpt = self.bytes_per_token(name)
        return self._tokens(matched * key.block_bytes / bpt, math.ceil(key.length / bpt), self.block_tokens(name))

    @staticmethod
    def _tokens(tokens: float, prompt_tokens: int, block: int) -> int:
        """``tokens`` in whole engine blocks, at most the prompt's last whole block before its last token."""
        limit = max(prompt_tokens - 1, 0) // block * block
        return min(int(tokens) // block * block, limit)

    # -- request outcomes ------------------------------------------------------------------------
    def committed(self, name: str, predicted: int) -> None:
        """This replica sent a request to ``name`` with ``predicted`` cached tokens."""
        decay = self._decay
        recent = self.recent
        for other in recent:
            recent[other] *= decay
        recent[name] = recent.get(name, 0.0) + 1.0
        self._window[name] = self._window.get(name, 0.0) + predicted
        if name not in self._applied:
            self.apply_capacity(name)

    def observe(self, name: str, key: PrefixKey, matched: int, usage: Any, elapsed_s: float,
                *, judge: bool = True) -> str | None:
        """Learn from a finished request that had ``matched`` index blocks on ``name``; returns the
        prediction outcome (exact/over/under) or None (also when ``judge`` is false: then only the
        bytes per token and the latency are learned)."""
        if type(usage) is not dict and not isinstance(usage, Mapping):  # a dict (parsed JSON) skips the ABC check
            return None
        prompt = usage.get("prompt_tokens")
        completion = usage.get("completion_tokens")
        if isinstance(completion, int) and completion >= 0:
            self.latency[name] = _ewma(self.latency.get(name), elapsed_s / (completion + 1))
        if not isinstance(prompt, int) or prompt <= 0 or key.length <= 0:
            return None
        self._learn_ratio(name, key.length, prompt)
        details = usage.get("prompt_tokens_details")
        cached = details.get("cached_tokens") if details is not None and isinstance(details, Mapping) else None
        if not isinstance(cached, int) or not judge:
            return None
        block = self.block_tokens(name)
        # the request's own bytes per token: the comparison measures the index, not the ratio's drift
        tokens_per_byte = prompt / key.length
        predicted = self._tokens(matched * key.block_bytes * tokens_per_byte, prompt, block) if matched > 0 else 0
        tolerance = block + key.block_bytes * tokens_per_byte + TOLERANCE * predicted
        error = predicted - cached
        outcome = "exact" if abs(error) <= tolerance else ("over" if error > 0 else "under")
        if outcome != "exact":
            factor = SHRINK if outcome == "over" else GROW
            scale = self._scale.get(name, 1.0) * factor
            self._scale[name] = min(max(scale, self._settings.min_scale), self._settings.max_scale)
        self._metrics.predictions.labels(name, outcome).inc()
        self._record_accuracy(name, "usage", 1.0 - min(abs(error) / prompt, 1.0))
        self.apply_capacity(name)
        return outcome

    def _learn_ratio(self, name: str, prompt_bytes: int, prompt_tokens: int) -> None:
        """Fold one prompt into the token-weighted bytes-per-token estimate (module docstring)."""
        prior = self._settings.bytes_per_token
        total_bytes, total_tokens = self._ratio_sums.get(name, (prior * PRIOR_TOKENS, PRIOR_TOKENS))
        total_bytes += prompt_bytes
        total_tokens += prompt_tokens
        if total_tokens > WINDOW_TOKENS:
            keep = WINDOW_TOKENS / total_tokens
            total_bytes, total_tokens = total_bytes * keep, WINDOW_TOKENS
        self._ratio_sums[name] = (total_bytes, total_tokens)
        self._bytes_per_token[name] = total_bytes / total_tokens

    def _record_accuracy(self, name: str, source: str, value: float) -> None:
        accuracy = self._accuracy[(name, source)] = _ewma(self._accuracy.get((name, source)), value)
        self._metrics.accuracy.labels(name, source).set(accuracy)

    def accuracy(self, name: str, source: str = "usage") -> float | None:
        return self._accuracy.get((name, source))

    # -- engine stats ----------------------------------------------------------------------------
    def on_stats(self, name: str, scrape: Scrape) -> None:
        """A new scrape: capacity and block size, and the counters' view of prediction accuracy."""
        stats = scrape.stats
        if stats.block_size:
            self._block_tokens[name] = stats.block_size
        if stats.capacity_tokens:
            self._capacity_tokens[name] = stats.capacity_tokens
        if stats.prefix_hits is not None and stats.prefix_queries is not None:
            previous = self._counters.get(name)
            self._counters[name] = (stats.prefix_hits, stats.prefix_queries)
            predicted = self._window.pop(name, 0.0)
            if previous is not None and stats.prefix_queries > previous[1]:
                hits = stats.prefix_hits - previous[0]
                queries = stats.prefix_queries - previous[1]
                self._record_accuracy(name, "counters", 1.0 - min(abs(predicted - hits) / queries, 1.0))
        self.apply_capacity(name)

    def on_restart(self, name: str) -> None:
        """The engine restarted: its cache is empty and its loop starts over."""
        for table in (self._scale, self._window, self._counters, self._applied):
            table.pop(name, None)
        self.prefill.forget(name)
        self._store.clear(name)

    def capacity_blocks(self, name: str) -> int:
        tokens = self._capacity_tokens.get(name, self._settings.default_capacity_tokens)
        blocks = tokens * self.bytes_per_token(name) / self._settings.block_bytes * self._scale.get(name, 1.0)
        return max(1, min(int(blocks), self._settings.max_blocks_per_endpoint))

    def apply_capacity(self, name: str) -> None:
        """Push the capacity to the store when it moved by more than 5% (or was never pushed)."""
        blocks = self.capacity_blocks(name)
        applied = self._applied.get(name)
        if applied is None or abs(blocks - applied) > 0.05 * applied:
            self._applied[name] = blocks
            self._store.set_capacity(name, blocks)
            self._metrics.capacity.labels(name).set(blocks)
