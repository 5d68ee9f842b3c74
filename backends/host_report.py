"""[io] ``kvgate plan --host``: what this host's vLLM can run, why, and what the default holds.

:func:`host_facts` reads the facts (``/proc/cpuinfo``; ``nvidia-smi`` for GPUs) that the pure rules
of ``backends.host`` decide on; :func:`plan_host` prints them: the host, its relevant CPU flags,
each ``--kv-cache-dtype`` with yes/no and the reason, what the worker venv's torch says about the
same ISA checks vLLM makes (and any disagreement with ``/proc/cpuinfo``), and the one-line notice
``kvgate up`` would print for the prepared model, with its planned KV capacity.
"""

from __future__ import annotations

import argparse
import contextlib
import json
from pathlib import Path
from typing import Any

from backends import paths
from backends.errors import BackendError


def host_facts(device: str = "auto") -> tuple[Any, list[Any]]:
    """[io] ``(HostFacts, gpus)``: ``/proc/cpuinfo``, and the first GPU's compute capability when
    ``device`` is ``gpu``, or ``auto`` and ``nvidia-smi`` sees one."""
    from backends.gpus import compute_capabilities, inventory
    from backends.host import detect

    gpus = inventory() if device in ("auto", "gpu") else []
    capabilities = compute_capabilities() if gpus else []
    return detect(gpu_capability=capabilities[0] if capabilities else None,
                  gpu_name=gpus[0].name if gpus else ""), gpus


def plan_host(args: argparse.Namespace) -> int:
    """``kvgate plan --host``: this host's facts, each KV dtype with why, and the local default."""
    from backends.host import kv_dtype_support
    from backends.workers.dtypes import choose_for_model

    facts, _ = host_facts()
    model = args.model or _prepared_model()
    chosen = choose_for_model(model, None, facts=facts, cpu_kvcache_space_gib=args.cpu_kvcache_space_gib or 1,
                              max_model_len=args.max_model_len or 2048) if model else None
    head_dim = None
    if model:
        with contextlib.suppress(BackendError):
            from backends.kv.geometry import load_geometry
            head_dim = load_geometry(model).head_dim
    support = kv_dtype_support(facts, head_dim)
    torch_answer = _ask_torch() if facts.device == "cpu" else None
    if args.json:
        print(json.dumps({"host": facts.describe(), "device": facts.device,
                          "cpu_flags": sorted(f for f in facts.cpu_flags if f.startswith(("avx", "amx"))),
                          "kv_cache_dtypes": {d: {"ok": s.ok, "reason": s.reason} for d, s in support.items()},
                          "torch": torch_answer, "model": str(model) if model else None,
                          "default": None if chosen is None else {
                              "kv_cache_dtype": chosen.choice.kv_cache_dtype, "dtype": chosen.choice.dtype or "auto",
                              "kv_tokens": chosen.kv_tokens, "fp8_kv_tokens": chosen.fp8_tokens,
                              "notice": chosen.notice}}, indent=2))
        return 0
    rows = [("host", facts.describe()),
            ("cpu flags", " ".join(sorted(f for f in facts.cpu_flags if f.startswith(("avx", "amx")))) or "-")]
    rows += [(f"kv {d}", f"{'yes' if s.ok else 'no '}  {s.reason}") for d, s in support.items()]
    if torch_answer is not None:
        rows.append(("torch says", json.dumps(torch_answer)))
    if chosen is not None:
        rows.append(("default", chosen.notice))
        rows.append(("", f"({Path(model).name}, VLLM_CPU_KVCACHE_SPACE={args.cpu_kvcache_space_gib or 1:g} GiB, "
                         f"--max-model-len {args.max_model_len or 2048})" if facts.device == "cpu" else ""))
    print("\n".join(f"{k:<16} {v}".rstrip() for k, v in rows))
    return 0


def _prepared_model() -> Path | None:
    """The prepared SmolLM2 directory, when ``kvgate prepare`` has made it (no install here)."""
    models = paths.models_dir(paths.kvgate_home())
    found = sorted(p.parent for p in models.glob("*/config.json")) if models.is_dir() else []
    return found[0] if found else None


def _ask_torch(timeout_s: float = 60.0) -> dict[str, Any] | None:
    """What the worker venv's torch says (``backends.host.TORCH_PROBE``) plus where it disagrees
    with ``/proc/cpuinfo``; None when the worker venv is not installed or the probe fails."""
    import subprocess

    from backends.host import TORCH_PROBE, detect, torch_agrees

    python = paths.worker_venv_dir(paths.kvgate_home()) / "bin" / "python"
    if not python.exists():
        return None
    try:
        done = subprocess.run([str(python), "-c", TORCH_PROBE], capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        answer = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        answer = None
    if not isinstance(answer, dict):
        return None
    return {**answer, "disagrees": torch_agrees(detect(), answer)}
