"""The step latency model of the simulated engine.

One engine step (one forward pass of a continuous batch) takes

    step_s = fixed_s + prefill_token_s * prefill_tokens + decode_seq_s * decode_seqs
             + attention_pair_s * attention_pairs

where ``prefill_tokens`` are the prompt tokens computed in the step (chunked prefill: at most the
step's token budget), ``decode_seqs`` the sequences that each compute one generated token, and
``attention_pairs`` the (query token, key token) pairs of causal attention in the step: a
sequence computing ``n`` new tokens after ``c`` tokens already in its KV cache adds
``n * c + n * (n + 1) / 2``. The first three terms are the roofline used at first order by
Vidur and LLMServingSim: a fixed launch/sampling cost, prefill bound by compute per token, decode
by weight reads shared across the batch plus a per-sequence share. The attention term is what
makes a cold prefill superlinear in the prompt and a warm one (few new tokens after a long cached
prefix) cost more than its new tokens alone: both are visible on the CPU engine, whose attention
kernels are not fused (docs/sim.md has the fit). ``admission_s`` is the API server's per-request
cost outside engine steps (chat templating, tokenization, detokenization), added once to TTFT.

Named presets that pair a latency model with an engine shape live in :mod:`backends.sim.presets`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LatencyModel:
    """Seconds per engine step as a linear function of the step's work (see module docstring)."""

    fixed_s: float
    prefill_token_s: float
    decode_seq_s: float
    admission_s: float = 0.0
    attention_pair_s: float = 0.0

    def step_seconds(self, prefill_tokens: int, decode_seqs: int, attention_pairs: float = 0.0) -> float:
        """Duration of one step with that much prefill, decode and attention work."""
        if prefill_tokens <= 0 and decode_seqs <= 0:
            return 0.0
        return (self.fixed_s + self.prefill_token_s * prefill_tokens
                + self.decode_seq_s * decode_seqs + self.attention_pair_s * attention_pairs)


def attention_pairs(new_tokens: int, context_tokens: int) -> float:
    """Causal-attention (query, key) pairs of ``new_tokens`` after ``context_tokens`` cached."""
    return new_tokens * context_tokens + new_tokens * (new_tokens + 1) / 2
