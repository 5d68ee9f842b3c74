"""One simulated vLLM worker: its configuration and the objects it is built from.

:class:`SimConfig` is the declarative description (served model name, engine preset, output
policy, start-up faults, seed, task: ``generate`` or ``embed``, whether Responses are stored).
:class:`SimWorker` builds, from a config and an injected :class:`~backends.sim.clock.Clock`,
everything a worker owns: tokenizer, engine (scheduler, prefix cache, latency model), metrics,
fault injector, a seeded id generator and the stored Responses. The HTTP surface
is in :mod:`backends.sim.server`; nothing here is global, so many workers can share one process
and one event loop.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from backends.sim.response_store import ResponseStore
from backends.sim.clock import Clock, LoopClock
from backends.sim.engine import SimEngine
from backends.sim.faults import Fault, FaultInjector
from backends.sim.prometheus import WorkerMetrics
from backends.sim.output import OutputPolicy
from backends.sim.presets import VLLM_CPU, EnginePreset
from backends.sim.responses import VLLM_VERSION
from backends.sim.tokenizer import SimTokenizer


@dataclass(frozen=True)
class SimConfig:
    """What one simulated worker serves and how it behaves."""

    model: str = "sim-model"
    preset: EnginePreset = VLLM_CPU
    output: OutputPolicy = field(default_factory=OutputPolicy)
    faults: tuple[Fault, ...] = ()
    seed: int = 0
    task: str = "generate"  # "generate" (chat, completions, responses, messages) or "embed" (embeddings)
    responses_store: bool = True  # keep stored responses (vLLM: VLLM_ENABLE_RESPONSES_API_STORE=1)
    embedding_dim: int = 384  # length of an embed worker's vectors

    @property
    def root(self) -> str:
        """What ``/v1/models`` reports as the model's ``root`` (a path on a real worker)."""
        return f"/sim/{self.preset.name}/{self.model}"


class SimWorker:
    """The state of one simulated worker (see module docstring)."""

    def __init__(self, config: SimConfig, clock: Clock | None = None) -> None:
        self.config = config
        self.clock: Clock = clock if clock is not None else LoopClock()
        preset = config.preset
        self.tokenizer = SimTokenizer(default_system_prompt=preset.default_system_prompt)
        self.metrics = WorkerMetrics(max_model_len=preset.max_model_len)
        self.engine = SimEngine(preset, self.clock, config.output, self.metrics)
        self.injector = FaultInjector(random.Random(f"faults:{config.seed}"))
        self._ids = random.Random(f"ids:{config.seed}")
        self.fingerprint = f"vllm-{VLLM_VERSION}-sim{config.seed:04x}"
        self.in_flight = 0
        self.responses = ResponseStore()
        for fault in config.faults:
            self.add_fault(fault)

    def new_id(self, prefix: str) -> str:
        """A response id like vLLM's (``chatcmpl-<16 hex>``), from the worker's seeded stream."""
        return f"{prefix}-{self._ids.getrandbits(64):016x}"

    def add_fault(self, fault: Fault) -> None:
        """Install a worker-wide fault (``stuck`` stops the engine at once)."""
        self.injector.add(fault)
        self.engine.stuck = self.injector.active("stuck")

    def clear_faults(self) -> None:
        """Remove every worker-wide fault and resume a stuck engine."""
        self.injector.clear()
        self.engine.stuck = False

    @property
    def healthy(self) -> bool:
        """What ``/health`` reports (``stuck`` does not show here, by design)."""
        return not self.injector.active("unhealthy")

    def cache_info(self) -> dict[str, str]:
        """Labels of ``vllm:cache_config_info`` (the fields routers read, named as vLLM does)."""
        preset = self.config.preset
        return {
            "block_size": str(preset.block_size),
            "cache_dtype": "fp8" if preset.name == "vllm-cpu" else "auto",
            "enable_prefix_caching": "True",
            "gpu_memory_utilization": "0.92",
            "kv_cache_size_tokens": str(preset.num_blocks * preset.block_size),
            "num_cpu_blocks": "None",
            "num_gpu_blocks": str(preset.num_blocks),
            "prefix_caching_hash_algo": "sim",
        }

    async def start(self) -> None:
        self.engine.start()

    async def stop(self) -> None:
        await self.engine.stop()
