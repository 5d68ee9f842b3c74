"""Where kvgate keeps its local state: the worker virtualenv, prepared models and worker logs.

Everything lives under one home directory, ``$KVGATE_HOME`` or ``~/.cache/kvgate``. The functions
are pure over the environment they are given (``os.environ`` by default) and create nothing;
callers create directories when they write into them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

HOME_ENV = "KVGATE_HOME"


def kvgate_home(env: Mapping[str, str] | None = None) -> Path:
    """Return the kvgate home: ``$KVGATE_HOME`` if set and non-empty, else ``~/.cache/kvgate``."""
    env = os.environ if env is None else env
    value = env.get(HOME_ENV, "").strip()
    if value:
        return Path(value).expanduser()
    return Path.home() / ".cache" / "kvgate"


def worker_venv_dir(home: Path | None = None) -> Path:
    """The virtualenv that holds vLLM (never the gateway's own environment)."""
    return (home or kvgate_home()) / "worker-venv"


def models_dir(home: Path | None = None) -> Path:
    """Directory of locally prepared models (one sub-directory per model)."""
    return (home or kvgate_home()) / "models"


def logs_dir(home: Path | None = None) -> Path:
    """Directory of worker logs (one file per worker name, rewritten at each start)."""
    return (home or kvgate_home()) / "logs"


def workers_state_file(home: Path | None = None) -> Path:
    """JSON status of the workers run by ``kvgate workers up`` (read by ``status``/``logs``/``down``)."""
    return (home or kvgate_home()) / "workers" / "state.json"
