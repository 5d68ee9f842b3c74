"""deploy/systemd: `systemd-analyze verify` accepts both units (only the absent binaries of this
machine are reported), the gateway unit is hardened, its environment file names only keys kvgate
reads, and the worker unit runs the flags kvgate's worker spec emits and kills the whole process
tree."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from backends.workers.spec import WorkerSpec
from backends.workers.vllm_args import worker_argv
from gateway.config import build_settings

from .tools import REPO, settings_key

SYSTEMD = REPO / "deploy" / "systemd"
UNITS = {"kvgate.service": "kvgate.service", "kvgate-worker@.service": "kvgate-worker@reasoning-0.service"}
ABSENT_BINARIES = ("/opt/kvgate/bin/kvgate", "/opt/vllm/bin/vllm")


def directives(unit: str) -> dict[str, list[str]]:
    """``Section.Key`` -> values, in order (systemd keys may repeat)."""
    out: dict[str, list[str]] = {}
    section = ""
    for line in (SYSTEMD / unit).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.setdefault(f"{section}.{key}", []).append(value)
    return out


@pytest.mark.parametrize("unit", sorted(UNITS))
def test_systemd_analyze_verify(unit, tmp_path: Path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze not found (apt-get install systemd)", pytrace=False)
    target = tmp_path / UNITS[unit]
    target.write_text((SYSTEMD / unit).read_text())
    result = subprocess.run([analyze, "verify", "--man=no", str(target)],
                            capture_output=True, text=True, timeout=60)
    problems = [line for line in (result.stdout + result.stderr).splitlines()
                if line.strip() and not any(f"Command {b} is not executable" in line for b in ABSENT_BINARIES)]
    assert not problems, "\n".join(problems)


def test_gateway_unit():
    d = directives("kvgate.service")
    assert d["Service.ExecStart"] == ["/opt/kvgate/bin/kvgate serve --config /etc/kvgate/config.toml"]
    assert d["Service.User"] == ["kvgate"]
    for key, value in {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
                       "PrivateTmp": "yes", "CapabilityBoundingSet": "", "Restart": "on-failure"}.items():
        assert d[f"Service.{key}"] == [value], key
    assert d["Service.EnvironmentFile"] == ["-/etc/kvgate/kvgate.env"], "secrets from a root-only file"


def test_worker_unit_runs_the_worker_specs_flags():
    d = directives("kvgate-worker@.service")
    assert d["Service.KillMode"] == ["control-group"], "EngineCore outlives a killed API server"
    assert d["Service.EnvironmentFile"] == ["/etc/kvgate/workers/%i.env"]
    assert d["Unit.Before"] == ["kvgate.service"]
    argv = shlex.split(d["Service.ExecStart"][0])
    variables = {"${MODEL}": "m", "${SERVED_MODEL_NAME}": "s", "${HOST}": "127.0.0.1", "${PORT}": "8001"}
    assert argv[-1] == "$VLLM_EXTRA_ARGS"
    argv = ["vllm"] + [variables.get(a, a) for a in argv[1:-1]]
    spec = WorkerSpec(model="m", served_model_name="s", port=8001, device="gpu", launcher="vllm-serve")
    assert argv == worker_argv(spec, python="python")


def test_env_example_configures_kvgate(monkeypatch):
    """Every KVGATE__ variable in kvgate.env.example (set or commented out) is a key kvgate reads,
    and with all of them set, config.example.toml loads with the admin key and Redis state."""
    for name in [n for n in os.environ if n.startswith("KVGATE")]:
        monkeypatch.delenv(name)
    variables: dict[str, str] = {}
    for line in (SYSTEMD / "kvgate.env.example").read_text().splitlines():
        line = line.lstrip("# ").strip()
        name, sep, value = line.partition("=")
        if sep and re.fullmatch(r"[A-Z][A-Z0-9_]*", name):
            variables[name] = value
    kvgate = {n: v for n, v in variables.items() if n.startswith("KVGATE")}
    assert {"KVGATE__AUTH__API_KEYS", "KVGATE__ADMIN__API_KEY", "KVGATE__STATE__BACKEND",
            "KVGATE__STATE__REDIS_URL"} <= set(kvgate)
    for name, value in kvgate.items():
        assert settings_key(name), f"kvgate reads no {name}"
        monkeypatch.setenv(name, value)
    settings = build_settings(tomllib.loads((REPO / "config.example.toml").read_text()))
    assert settings.admin.api_key is not None and settings.admin.api_key.get_secret_value()
    assert settings.state.backend == "redis" and settings.state.redis_url


def test_gateway_unit_names_only_variables_kvgate_reads():
    text = (SYSTEMD / "kvgate.service").read_text()
    names = set(re.findall(r"\bKVGATE_[A-Z0-9_]+", text))
    assert names and all(settings_key(n) for n in names), names
