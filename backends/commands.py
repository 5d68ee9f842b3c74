"""Running the external commands of runtime preparation (pip, venv, the GGUF converter).

One function, :func:`run_logged`, starts a command, streams each output line to a ``log``
callback as it arrives (so long pip installs show progress) and raises :class:`PrepareError`
with the tail of the output when the command fails. :func:`child_env` builds the environment
for such commands so that the gateway's own Python settings never leak into the worker venv.
"""

from __future__ import annotations

import collections
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence

from backends.errors import PrepareError

Log = Callable[[str], None]

# Variables that would point a child interpreter at the gateway's environment.
_FOREIGN_PYTHON_VARS = frozenset({"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "__PYVENV_LAUNCHER__"})

_TAIL_LINES = 40


def child_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """Return ``base`` (default ``os.environ``) minus Python-location variables, plus ``extra``."""
    base = os.environ if base is None else base
    env = {k: v for k, v in base.items() if k not in _FOREIGN_PYTHON_VARS}
    env.update(extra)
    return env


def run_logged(
    argv: Sequence[str],
    *,
    what: str,
    log: Log,
    env: Mapping[str, str] | None = None,
    prefix: str = "    ",
) -> None:
    """Run ``argv`` to completion, logging each output line (stdout and stderr merged).

    ``what`` names the step in the error message. Raises :class:`PrepareError` if the command
    cannot be started or exits non-zero; the message holds the last 40 output lines.
    """
    tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
    try:
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=dict(child_env() if env is None else env),
            text=True,
            errors="replace",
            bufsize=1,
        )
    except OSError as exc:
        raise PrepareError(f"{what}: cannot run {argv[0]!r}: {exc}") from exc
    with proc:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip()
            tail.append(line)
            if line:
                log(prefix + line)
        code = proc.wait()
    if code != 0:
        output = "\n".join(tail)
        raise PrepareError(f"{what} failed (exit code {code}); last output:\n{output}")
