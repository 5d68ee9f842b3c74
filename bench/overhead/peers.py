"""[io] Lazy, cached installs of the peers (and py-spy), each in its own environment outside the
repository: ``${KVGATE_HOME:-~/.cache/kvgate}/peers/<name>/``.

    litellm         venv, ``litellm[proxy]`` (the proxy server and its CLI)
    vllm-router     venv, the Rust router wheel from PyPI
    sglang-router   venv, the Rust router wheel from PyPI
    portkey         npm project, ``@portkey-ai/gateway`` with ``@hono/node-server`` pinned by
                    ``overrides`` (streaming responses stall with newer node-server releases)
    py-spy          venv, the sampling profiler (``--profile``)

A ``.installed`` file holding the install spec marks a finished install; a different spec (a new
pin) reinstalls. Install output goes to ``peers/logs/<name>.log``. An install that fails returns
the reason; the run then shows that row as unavailable and goes on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PIP_SPECS = {
    "litellm": ["litellm[proxy]==1.108.7"],
    "vllm-router": ["vllm-router==0.1.17"],
    "sglang-router": ["sglang-router==0.3.2"],
    "py-spy": ["py-spy"],
}
PORTKEY_PACKAGE = {
    "name": "kvgate-bench-portkey",
    "private": True,
    "dependencies": {"@portkey-ai/gateway": "1.15.2", "@hono/node-server": "1.13.8"},
    "overrides": {"@hono/node-server": "1.13.8"},
}
INSTALL_TIMEOUT_S = 1200


def peers_home() -> Path:
    return Path(os.environ.get("KVGATE_HOME", "~/.cache/kvgate")).expanduser() / "peers"


@dataclass(frozen=True)
class Installed:
    """Where a peer lives, or why it does not."""

    name: str
    root: Path
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def bin(self, program: str) -> Path:
        return self.root / "venv" / "bin" / program


def _marker_ok(root: Path, spec: str) -> bool:
    marker = root / ".installed"
    return marker.exists() and marker.read_text() == spec


def _run(argv: list[str], log: Path, cwd: Path | None = None) -> str | None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        try:
            done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, cwd=cwd, timeout=INSTALL_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"{argv[0]}: {error}"
    if done.returncode != 0:
        return f"`{' '.join(argv[:4])} ...` exited {done.returncode} (see {log})"
    return None


def ensure(name: str, log=print) -> Installed:  # type: ignore[no-untyped-def]
    """Install ``name`` unless its cached install matches the current spec."""
    home = peers_home()
    root = home / name
    logfile = home / "logs" / f"{name}.log"
    if name == "portkey":
        spec = json.dumps(PORTKEY_PACKAGE, sort_keys=True)
        if _marker_ok(root, spec):
            return Installed(name, root)
        if shutil.which("npm") is None:
            return Installed(name, root, "npm not found")
        log(f"installing {name} (npm) into {root} ...")
        root.mkdir(parents=True, exist_ok=True)
        (root / "package.json").write_text(json.dumps(PORTKEY_PACKAGE, indent=2) + "\n")
        error = _run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], logfile, cwd=root)
    else:
        spec = " ".join(PIP_SPECS[name])
        if _marker_ok(root, spec):
            return Installed(name, root)
        log(f"installing {name} ({spec}) into {root} ...")
        root.mkdir(parents=True, exist_ok=True)
        error = None
        if not (root / "venv" / "bin" / "python").exists():
            error = _run([sys.executable, "-m", "venv", str(root / "venv")], logfile)
        if error is None:
            error = _run([str(root / "venv" / "bin" / "pip"), "install", "-q", *PIP_SPECS[name]], logfile)
    if error is not None:
        return Installed(name, root, f"install failed: {error}")
    (root / ".installed").write_text(spec)
    return Installed(name, root)


def version_of(installed: Installed) -> str:
    """The installed peer's version, for the JSON record (best effort)."""
    try:
        if installed.name == "portkey":
            package = installed.root / "node_modules" / "@portkey-ai" / "gateway" / "package.json"
            return str(json.loads(package.read_text())["version"])
        distribution = {"litellm": "litellm", "py-spy": "py-spy"}.get(installed.name, installed.name)
        done = subprocess.run(
            [str(installed.bin("python")), "-c", f"import importlib.metadata as m; print(m.version({distribution!r}))"],
            capture_output=True, text=True, timeout=60,
        )
        return done.stdout.strip() or "?"
    except (OSError, KeyError, ValueError, subprocess.TimeoutExpired):
        return "?"
