"""[io] The dtypes a worker launches with on this host, and the one line that says so.

:func:`choose_for_model` joins three things: the host's facts (``backends.host.detect``, or
given), the model's ``config.json`` (checkpoint dtype, parameter count, head size) and the KV
planner (``backends.kv.planner``), which prices the choice: the KV tokens the chosen dtype
holds in the worker's KV memory beside those FP8 would hold. An explicit ``--kv-cache-dtype``
that cannot run here raises ``ValueError`` with the reason, before anything is launched.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backends.errors import BackendError
from backends.kv.geometry import load_config, load_geometry
from backends import host
from backends.host import DtypeChoice, HostFacts, choose_dtypes
from backends.kv.planner import DEFAULT_BLOCK_SIZE, KvBudget, cpu_budget, kv_storage_dtype, plan
from backends.model_presets import PRESETS


@dataclass(frozen=True, slots=True)
class Chosen:
    """A :class:`~backends.host.DtypeChoice` with its planned capacity and its notice line."""

    choice: DtypeChoice
    kv_tokens: int | None
    fp8_tokens: int | None
    facts: HostFacts

    @property
    def notice(self) -> str:
        return self.choice.notice(self.kv_tokens, self.fp8_tokens)


def checkpoint_dtype(model: str | Path) -> str | None:
    """The checkpoint's ``torch_dtype`` (or ``dtype``) from its ``config.json`` or preset; None if unknown."""
    preset = PRESETS.get(str(model))
    try:
        config = preset.config if preset is not None else load_config(model)[0]
    except BackendError:
        return None
    value = config.get("torch_dtype") or config.get("dtype") or (config.get("text_config") or {}).get("torch_dtype")
    return value if isinstance(value, str) else None


def choose_for_model(model: str | Path, requested: str | None = None, *, facts: HostFacts | None = None,
                     cpu_kvcache_space_gib: float | None = None, budget: KvBudget | None = None,
                     max_model_len: int | None = None, block_size: int | None = None,
                     dtype: str | None = None) -> Chosen:
    """The dtypes for ``model`` (a directory, ``config.json`` or preset) on this host.

    Capacity: ``budget``, else ``VLLM_CPU_KVCACHE_SPACE`` = ``cpu_kvcache_space_gib``; no
    figures when neither is given or the model cannot be planned. Raises ``ValueError`` for an
    explicit ``requested`` dtype this host cannot run. ``dtype``: an explicit ``--dtype``.
    """
    facts = facts if facts is not None else host.detect()
    try:
        geometry = load_geometry(model)
    except BackendError:
        geometry = None
    choice = choose_dtypes(facts, requested=requested, checkpoint_dtype=checkpoint_dtype(model),
                           params=geometry.params if geometry else None,
                           head_dim=geometry.head_dim if geometry else None, dtype_asked=dtype)
    if budget is None and cpu_kvcache_space_gib:
        budget = cpu_budget(cpu_kvcache_space_gib)
    if geometry is None or budget is None:
        return Chosen(choice, None, None, facts)
    size = block_size or DEFAULT_BLOCK_SIZE[facts.device]

    def tokens(kv_dtype: str) -> int | None:
        return plan(geometry, kv_cache_dtype=kv_dtype, max_model_len=max_model_len, budget=budget,
                    block_size=size).kv_cache_tokens

    return Chosen(choice, tokens(kv_storage_dtype(choice.kv_cache_dtype, choice.dtype)), tokens("fp8"), facts)
