"""The deployment tools the tests drive (helm, kubernetes-validate, docker-compose) and helpers.

Each tool is found through an environment variable (``KVGATE_HELM``,
``KVGATE_KUBERNETES_VALIDATE``, ``KVGATE_DOCKER_COMPOSE``) or in the directory that
``scripts/ci/deploy-tools.sh`` installs into (``${KVGATE_HOME:-~/.cache/kvgate}/tools/bin``).
A missing tool fails the test with the command to run: these checks are never skipped.
"""

from __future__ import annotations

import copy
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "kvgate"
CI_VALUES = CHART / "ci"
BAD_VALUES = Path(__file__).resolve().parent / "bad-values"
KUBERNETES_VERSION = "1.33.0"
RELEASE = "kvgate"
NAMESPACE = "llm"

_TOOL_ENV = {
    "helm": "KVGATE_HELM",
    "kubernetes-validate": "KVGATE_KUBERNETES_VALIDATE",
    "docker-compose": "KVGATE_DOCKER_COMPOSE",
}


def tools_dir() -> Path:
    home = os.environ.get("KVGATE_HOME") or str(Path.home() / ".cache" / "kvgate")
    return Path(home) / "tools" / "bin"


def tool(name: str) -> str:
    """Path of deployment tool ``name``; fails the calling test when it is not installed."""
    env = _TOOL_ENV[name]
    path = Path(os.environ.get(env) or tools_dir() / name)
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(
            f"{name} not found at {path} (set {env} or run scripts/ci/deploy-tools.sh)",
            pytrace=False,
        )
    return str(path)


def run(argv: Sequence[str], *, stdin: str | None = None, env: Mapping[str, str] | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, timeout=timeout,
        env=None if env is None else dict(env),
    )


def helm_template(values_files: Sequence[Path]) -> subprocess.CompletedProcess[str]:
    argv = [tool("helm"), "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for values in values_files:
        argv += ["-f", str(values)]
    return run(argv)


def helm_lint(values_files: Sequence[Path]) -> subprocess.CompletedProcess[str]:
    argv = [tool("helm"), "lint", "--strict", str(CHART), "--namespace", NAMESPACE]
    for values in values_files:
        argv += ["-f", str(values)]
    return run(argv)


def output(result: subprocess.CompletedProcess[str]) -> str:
    return f"exit {result.returncode}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"


@dataclass(frozen=True)
class Rendered:
    """``helm template`` output for one set of values files, with the merged values."""

    text: str
    docs: tuple[dict[str, Any], ...]
    values: dict[str, Any]

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [d for d in self.all(kind) if name is None or d["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
        return found[0]

    def has(self, kind: str, name: str) -> bool:
        return any(d["metadata"]["name"] == name for d in self.all(kind))


def render(values_files: Sequence[Path]) -> Rendered:
    result = helm_template(values_files)
    assert result.returncode == 0, output(result)
    docs = tuple(d for d in yaml.safe_load_all(result.stdout) if d)
    return Rendered(text=result.stdout, docs=docs, values=merged_values(values_files))


def merged_values(values_files: Sequence[Path]) -> dict[str, Any]:
    """values.yaml with ``values_files`` merged over it as Helm coalesces them (null deletes)."""
    merged = yaml.safe_load((CHART / "values.yaml").read_text())
    for values in values_files:
        merged = _coalesce(merged, yaml.safe_load(values.read_text()) or {})
    return merged


def _coalesce(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _coalesce(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def fullname() -> str:
    return RELEASE  # the release name contains "kvgate", so it is the prefix as is


def enabled_clusters(values: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {name: c for name, c in sorted(values["workers"]["clusters"].items()) if c["enabled"]}


def container(workload: Mapping[str, Any], name: str) -> dict[str, Any]:
    containers = workload["spec"]["template"]["spec"]["containers"]
    found = [c for c in containers if c["name"] == name]
    assert len(found) == 1, f"no container {name!r} in {workload['metadata']['name']}"
    return found[0]


def env_map(ctr: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in ctr.get("env", [])}


# --- environment: Kubernetes substitution, kvgate's KVGATE__ names --------------------------------

_K8S_REF = re.compile(r"\$\$|\$\(([-._a-zA-Z][-._a-zA-Z0-9]*)\)")


def resolved_env(ctr: Mapping[str, Any], secrets: Mapping[str, str]) -> dict[str, str]:
    """The container's environment as the kubelet builds it: Secret-sourced variables take
    ``secrets[name]`` (a placeholder per variable name), and ``$(VAR)`` in a ``value`` is replaced
    by an earlier variable's value (``$$`` escapes; unknown references stay as written)."""
    env: dict[str, str] = {}
    for var in ctr.get("env", []):
        name = var["name"]
        if "value" in var:
            def _sub(match: re.Match[str]) -> str:
                if match.group(0) == "$$":
                    return "$"
                return env.get(match.group(1), match.group(0))
            env[name] = _K8S_REF.sub(_sub, str(var["value"]))
        else:
            assert set(var["valueFrom"]) == {"secretKeyRef"}, name
            env[name] = secrets[name]
    return env


def settings_key(name: str) -> str | None:
    """The dotted settings path a ``KVGATE__SECTION__KEY`` variable sets in kvgate's Settings, or
    None when kvgate reads no such key (a placeholder name that configures nothing)."""
    from pydantic import BaseModel

    from gateway.config import Settings

    if not name.startswith("KVGATE__"):
        return None
    model: type[BaseModel] = Settings
    parts = name.removeprefix("KVGATE__").lower().split("__")
    for index, part in enumerate(parts):
        field = model.model_fields.get(part)
        if field is None:
            return None
        annotation = field.annotation
        if index == len(parts) - 1:
            return ".".join(parts)
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        nested = [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]
        if not nested:
            return None
        model = nested[0]
    return None
