"""KV pruning policies, a cache that evicts per KV head, and generation/scoring under a budget.

[worker env: torch, transformers] :class:`PrunedCache` is a ``transformers.DynamicCache`` that
also keeps, per layer and KV head, each cached token's original position, its cumulative attention
(summed over the query heads of its group and over every query so far), how many queries could see
it, and the last forward's observation-window attention. After each forward,
:meth:`PrunedCache.compress` keeps ``ceil(keep * tokens_seen)`` entries (at least
``MIN_KEEP``) chosen by a policy, per KV head (every head keeps the same count, its own tokens):

- ``streaming`` (StreamingLLM, Xiao et al. 2023, arXiv:2309.17453): the first ``SINKS`` tokens
  (attention sinks) and the most recent ones;
- ``h2o`` (Heavy-Hitter Oracle, Zhang et al. 2023, arXiv:2306.14048): half the budget recent, the
  other half the highest cumulative attention;
- ``snapkv`` (Li et al. 2024, arXiv:2404.14469): the last ``WINDOW`` queries' attention, summed and
  average-pooled (kernel ``POOL``), selects the prefix; the window itself is kept. As in the paper
  it compresses the prompt (forwards of at least ``WINDOW`` tokens) and lets decoded tokens append;
- ``baseline`` (the seeds' per-request manager): ``SINKS`` sinks, a recent window of a quarter of
  the budget, and the top tokens by mean attention (cumulative / queries that could see it).

Positions stay the original ones (RoPE was applied before caching), so kept keys keep their place.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache

from backends.kv.lab import POLICIES, engine

SINKS, WINDOW, POOL, MIN_KEEP = 4, 16, 7, 24


class PrunedCache(DynamicCache):
    """A DynamicCache whose entries are evicted per KV head by ``policy`` to ``keep`` of the tokens seen."""

    def __init__(self, policy: str | None, keep: float = 1.0) -> None:
        super().__init__()
        if policy is not None and policy not in POLICIES:
            raise ValueError(f"unknown pruning policy {policy!r}: expected {', '.join(POLICIES)}")
        self.policy, self.keep, self.seen = policy, keep, 0
        self.pos: list[torch.Tensor] = []
        self.acc: list[torch.Tensor] = []
        self.cnt: list[torch.Tensor] = []
        self.window: list[torch.Tensor] = []
        self._next: torch.Tensor | None = None

    def begin(self, n_new: int) -> None:
        """Announce the next forward's ``n_new`` tokens (positions ``seen..seen+n_new-1``)."""
        self._next = torch.arange(self.seen, self.seen + n_new)
        self.seen += n_new

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int,
               *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        heads = key_states.shape[1]
        new = self._next.unsqueeze(0).expand(heads, -1)
        if layer_idx == len(self.pos):
            self.pos.append(new.clone())
            for stats in (self.acc, self.cnt, self.window):
                stats.append(torch.zeros(new.shape))
        else:
            self.pos[layer_idx] = torch.cat([self.pos[layer_idx], new], dim=1)
            for stats in (self.acc, self.cnt, self.window):
                stats[layer_idx] = torch.cat([stats[layer_idx], torch.zeros(new.shape)], dim=1)
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    def observe(self, layer: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                probs: torch.Tensor) -> None:
        """Accumulate one forward's attention ``[1, heads, q, k]`` into the layer's statistics."""
        kv_heads = key.shape[1]
        p = probs[0].reshape(kv_heads, -1, probs.shape[-2], probs.shape[-1]).sum(1)  # [kv_heads, q, k]
        q_len, k_len = p.shape[-2:]
        self.acc[layer] += p.sum(1)
        seen_by = torch.full((k_len,), float(q_len))
        seen_by[k_len - q_len:] = torch.arange(q_len, 0, -1, dtype=torch.float32)
        self.cnt[layer] += seen_by
        self.window[layer] = p[:, -WINDOW:, :].sum(1)

    def budget(self) -> int:
        return max(MIN_KEEP, math.ceil(self.keep * self.seen))

    def compress(self, forward_len: int) -> None:
        """Evict down to :meth:`budget` after a forward of ``forward_len`` tokens (policy permitting)."""
        if self.policy is None or (self.policy == "snapkv" and forward_len < WINDOW):
            return
        budget = self.budget()
        for layer, layer_cache in enumerate(self.layers):
            if layer_cache.keys.shape[2] <= budget:
                continue
            idx = select(self.policy, budget, self.acc[layer], self.cnt[layer], self.window[layer])
            gather = idx[None, :, :, None].expand(1, -1, -1, layer_cache.keys.shape[-1])
            layer_cache.keys = layer_cache.keys.gather(2, gather)
            layer_cache.values = layer_cache.values.gather(2, gather)
            for stats in (self.pos, self.acc, self.cnt, self.window):
                stats[layer] = stats[layer].gather(1, idx)


def _top(scores: torch.Tensor, lo: int, hi: int, count: int) -> torch.Tensor:
    """Indices (per head) of the ``count`` best scores among physical slots ``lo..hi-1``."""
    if count <= 0 or hi <= lo:
        return torch.empty(scores.shape[0], 0, dtype=torch.long)
    return scores[:, lo:hi].topk(min(count, hi - lo), dim=1).indices + lo


def select(policy: str, budget: int, acc: torch.Tensor, cnt: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
    """Kept slots ``[kv_heads, budget]`` (sorted) out of ``n`` cached; statistics are ``[kv_heads, n]``."""
    heads, n = acc.shape
    arange = torch.arange(n).expand(heads, n)
    if policy == "streaming":
        parts = [arange[:, :SINKS], arange[:, n - (budget - SINKS):]]
    elif policy == "h2o":
        recent = budget // 2
        parts = [_top(acc, 0, n - recent, budget - recent), arange[:, n - recent:]]
    elif policy == "snapkv":
        pooled = torch.nn.functional.avg_pool1d(window[:, None, : n - WINDOW], POOL, 1, POOL // 2,
                                                count_include_pad=False)[:, 0]
        parts = [_top(pooled, 0, n - WINDOW, budget - WINDOW), arange[:, n - WINDOW:]]
    elif policy == "baseline":
        recent = max(1, budget // 4)
        mean = acc / cnt.clamp(min=1)
        parts = [arange[:, :SINKS], _top(mean, SINKS, n - recent, budget - SINKS - recent), arange[:, n - recent:]]
    else:
        raise ValueError(f"unknown pruning policy {policy!r}")
    return torch.cat(parts, dim=1).sort(dim=1).values


def run_forward(lab: engine.LabModel, cache: PrunedCache, ids: torch.Tensor, keep: int = 0) -> torch.Tensor:
    """Forward ``ids`` ``[1, n]`` through ``cache`` with its statistics observed, then compress.

    ``keep``: logits of the last ``keep`` positions only (0: all).
    """
    n = ids.shape[1]
    start = cache.seen
    cache.begin(n)
    engine.SESSION.observers.append(cache.observe)
    try:
        logits = engine.forward(lab, ids, cache, start, keep)
    finally:
        engine.SESSION.observers.remove(cache.observe)
    cache.compress(n)
    return logits


def continue_and_answer(lab: engine.LabModel, cache: PrunedCache, last_logits: torch.Tensor, rest: torch.Tensor,
                        chunk: int, new_tokens: int, eos: int | None) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """Teacher-force ``rest`` ``[1, n]`` after the cached prefix, ``chunk`` tokens a forward, then answer.

    ``last_logits``: ``[vocab]``, the prefix's last position. Returns the NLL (nats) and argmax of
    each of the ``n`` tokens of ``rest`` and up to ``new_tokens`` greedy tokens after it (pruning
    after every forward).
    """
    pieces = [last_logits.view(1, -1)]
    for start in range(0, rest.shape[1], chunk):
        pieces.append(run_forward(lab, cache, rest[:, start:start + chunk])[0])
    logits = torch.cat(pieces, dim=0)
    nll = torch.nn.functional.cross_entropy(logits[:-1], rest[0], reduction="none")
    answer = [int(logits[-1].argmax())]
    while len(answer) < new_tokens and answer[-1] != eos:
        answer.append(int(run_forward(lab, cache, torch.tensor([[answer[-1]]]))[0, -1].argmax()))
    return nll, logits[:-1].argmax(-1), [t for t in answer if t != eos]


def first_divergence(reference: Sequence[int], other: Sequence[int]) -> int | None:
    """Index of the first differing token (None if equal; the shorter length if one is a prefix)."""
    for i, (a, b) in enumerate(zip(reference, other)):
        if a != b:
            return i
    return None if len(reference) == len(other) else min(len(reference), len(other))
