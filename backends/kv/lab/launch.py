"""[io] ``kvgate kv-lab`` on the gateway side: prepare the worker venv, then run the lab inside it.

The lab needs torch and transformers, which live only in the worker venv ``kvgate prepare``
installs (``backends.workers.env``); the gateway never imports them. :func:`run_lab`:

1. :func:`backends.workers.prepared.prepare_runtime` (idempotent: the venv and SmolLM2 once);
2. :func:`ensure_plotting`: ``import matplotlib`` in the worker venv, else ``pip install
   matplotlib`` there with the same command line and index as the worker install
   (``backends.workers.env.pip_install_argv``); skipped with ``--no-plots``;
3. ``WORKER_PYTHON -m backends.kv.lab --model-dir DIR --out OUT ...`` with ``PYTHONPATH`` set to
   the directory holding this ``backends`` package (only its torch-free modules and the lab are
   imported there), stdout and stderr passed through, offline (``HF_HUB_OFFLINE=1``).

The default output directory is ``$KVGATE_HOME/kv-lab`` (:func:`default_out_dir`), where
``kvgate kv-check`` looks for the lab's per-layer findings (:func:`findings_hint`).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from backends import paths
from backends.commands import Log, child_env, run_logged
from backends.errors import BackendError

PACKAGE_ROOT = Path(__file__).resolve().parents[3]
"""The directory that holds the ``backends`` package (put on the lab's ``PYTHONPATH``)."""

PLOTTING = ("matplotlib",)
RECORD_NAME = "kv-lab.json"


def default_out_dir(home: Path | None = None) -> Path:
    """Where the lab writes its record and plots by default: ``$KVGATE_HOME/kv-lab``."""
    return (home or paths.kvgate_home()) / "kv-lab"


def has_module(python: Path, module: str) -> bool:
    """True if ``python`` can import ``module``."""
    done = subprocess.run([str(python), "-c", f"import {module}"], env=child_env(), capture_output=True)
    return done.returncode == 0


def ensure_plotting(python: Path, *, log: Log, extra_index_url: str | None = None) -> None:
    """Install matplotlib into the worker venv of ``python`` if it cannot import it."""
    from backends.workers.env import TORCH_INDEX_ENV, pip_install_argv

    if has_module(python, "matplotlib"):
        return
    log("kv-lab: installing matplotlib into the worker venv (for the plots)")
    index = extra_index_url or os.environ.get(TORCH_INDEX_ENV) or None
    run_logged(pip_install_argv(python, PLOTTING, index), what="pip install matplotlib into the worker venv", log=log)


def lab_argv(python: Path, model_dir: Path, out_dir: Path, extra: Sequence[str]) -> list[str]:
    """The worker-side command line."""
    return [str(python), "-m", "backends.kv.lab", "--model-dir", str(model_dir), "--out", str(out_dir), *extra]


def run_lab(extra: Sequence[str], *, out_dir: Path | None = None, log: Log = print, plots: bool = True) -> int:
    """Prepare, then run the lab with ``extra`` arguments; the lab's exit code.

    Raises :class:`backends.errors.PrepareError` when preparation or the matplotlib install fails.
    """
    from backends.workers.prepared import prepare_runtime

    runtime = prepare_runtime(log=log)
    if plots:
        ensure_plotting(runtime.worker_python, log=log)
    out = Path(out_dir) if out_dir is not None else default_out_dir()
    env = child_env(PYTHONPATH=str(PACKAGE_ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                    TOKENIZERS_PARALLELISM="false")
    argv = lab_argv(runtime.worker_python, runtime.model_dir, out, [*extra, *([] if plots else ["--no-plots"])])
    log(f"kv-lab: {' '.join(argv[1:])}")
    try:
        return subprocess.run(argv, env=env, stdin=subprocess.DEVNULL).returncode
    except OSError as exc:
        raise BackendError(f"kv-lab: cannot run {argv[0]}: {exc}") from exc


def findings_hint(out_dir: Path | None = None) -> str:
    """A few lines for kv-check's output: the lab's most distorted layers, or how to measure them."""
    path = (Path(out_dir) if out_dir is not None else default_out_dir()) / RECORD_NAME
    try:
        record = json.loads(path.read_text())
        findings = record["fp8"]["findings"]
    except (OSError, ValueError, KeyError, TypeError):
        return ("per-layer FP8 findings: none recorded; run `kvgate kv-lab --study fp8` to measure K/V error "
                "and attention KL per layer (E4M3 vs E5M2, unit vs calibrated scales)")
    lines = [f"per-layer FP8 findings from {path} (attention KL, K relative error):"]
    for variant, layers in findings.items():
        worst = ", ".join(f"layer {r['layer']} KL {r['attn_kl']:.2e} K err {r['k_rel_err']:.3f}" for r in layers)
        lines.append(f"  {variant}: {worst}")
    checkpoint = record["fp8"].get("scales_checkpoint")
    if checkpoint:
        lines.append(f"  calibrated E4M3 scales for vLLM: {checkpoint}")
    return "\n".join(lines)
