"""[io] Do the flags kvgate emits still parse with the installed vLLM? Ask vLLM's own parser.

vLLM renames and removes ``serve`` flags between releases (0.32 dropped
``--disable-log-requests`` for ``--no-enable-log-requests``); a golden argv test alone cannot
notice. :func:`check_specs` runs ``backends/workers/vllm_flag_probe.py`` with the worker venv's python
(vLLM is importable only there), feeding it ``--model M`` plus :func:`~backends.workers.vllm_args.server_flags`
for each spec, and returns one :class:`FlagVerdict` per spec. One subprocess checks any number
of specs (vLLM's import takes about 4 s on these machines).

Errors: :class:`~backends.errors.BackendError` when the probe cannot run or answers nothing
readable (with the tail of its output); a rejected argv is a verdict, not an error.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from backends.commands import child_env
from backends.errors import BackendError
from backends.workers.spec import WorkerSpec
from backends.workers.vllm_args import OFFLINE_ENV, server_flags
from backends.workers.vllm_flag_probe import RESULT_PREFIX

PROBE_SCRIPT = Path(__file__).with_name("vllm_flag_probe.py")


@dataclass(frozen=True, slots=True)
class FlagVerdict:
    """vLLM's answer for one argv: accepted, or the parser's error message."""

    argv: tuple[str, ...]
    ok: bool
    error: str = ""


def probe_argv(spec: WorkerSpec) -> list[str]:
    """What the probe parses for ``spec``: ``--model M`` and every generated flag."""
    return ["--model", spec.model, *server_flags(spec)]


def check_argvs(argvs: Sequence[Sequence[str]], python: str | Path, *,
                timeout_s: float = 180.0) -> list[FlagVerdict]:
    """Parse each argv (as ``vllm serve`` takes it) with vLLM's parser in ``python``'s environment."""
    payload = json.dumps([list(argv) for argv in argvs])
    try:
        done = subprocess.run([str(python), str(PROBE_SCRIPT)], input=payload, capture_output=True,
                              text=True, timeout=timeout_s, env=child_env(**OFFLINE_ENV), check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BackendError(f"vLLM flag probe: cannot run {python}: {exc}") from exc
    line = next((ln for ln in reversed(done.stdout.splitlines()) if ln.startswith(RESULT_PREFIX)), None)
    if line is None:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise BackendError(f"vLLM flag probe (exit code {done.returncode}) gave no result; last output:\n{tail}")
    results = json.loads(line[len(RESULT_PREFIX):])
    return [FlagVerdict(tuple(argv), bool(r["ok"]), str(r["error"])) for argv, r in zip(argvs, results, strict=True)]


def check_specs(specs: Sequence[WorkerSpec], python: str | Path, *, timeout_s: float = 180.0) -> list[FlagVerdict]:
    """One verdict per spec, in order (see :func:`check_argvs`)."""
    return check_argvs([probe_argv(spec) for spec in specs], python, timeout_s=timeout_s)
