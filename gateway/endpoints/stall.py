"""Detects an engine that answers ``/health`` but makes no progress (pure, clock injected).

vLLM's ``/health`` keeps answering 200 while a wedged engine core generates nothing. The signal
is in its metrics: requests are in the engine (``vllm:num_requests_running`` plus
``vllm:num_requests_waiting`` > 0) but the generated-token counter
(``vllm:generation_tokens_total``) has not moved for ``stall_s`` seconds. Such an endpoint is
*stalled*: it takes no new requests until the counter moves again or the engine holds no requests
any more (its stuck requests were aborted; the next requests or checks judge it anew).
``stall_s`` must exceed the longest prefill the engine may do before its first token.

Inputs are the scraped :class:`~gateway.endpoints.metrics_parse.EngineStats` snapshots (one per
scrape); an engine that reports neither figure is never judged stalled.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.endpoints.metrics_parse import EngineStats


@dataclass
class _Progress:
    tokens: float
    since: float


class StallDetector:
    """Per endpoint name: is it stalled? ``stall_s`` <= 0 disables detection."""

    def __init__(self, stall_s: float) -> None:
        self._stall_s = stall_s
        self._progress: dict[str, _Progress] = {}

    def observe(self, name: str, stats: EngineStats, now: float) -> bool:
        """Feed one scrape taken at ``now`` (seconds); return whether ``name`` is stalled."""
        if self._stall_s <= 0 or stats.generated_tokens is None or stats.running is None:
            self._progress.pop(name, None)
            return False
        held = stats.running + (stats.waiting or 0.0)
        last = self._progress.get(name)
        if held <= 0 or last is None or stats.generated_tokens != last.tokens:
            self._progress[name] = _Progress(stats.generated_tokens, now)
            return False
        return now - last.since >= self._stall_s

    def forget(self, name: str) -> None:
        self._progress.pop(name, None)
