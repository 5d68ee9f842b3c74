"""deploy/docker: the gateway image is multi-stage, runs as a non-root numeric user, starts
`kvgate serve --config /etc/kvgate/config.toml`, and its baked-in config loads. (No container
engine here: the Dockerfile is checked by reading it.)"""

from __future__ import annotations

import json
import os
import re
import tomllib

from gateway.config import build_settings

from .tools import REPO

DOCKER = REPO / "deploy" / "docker"


def instructions() -> list[tuple[str, str]]:
    text = (DOCKER / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)  # join continuation lines
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for word, rest in instructions():
        if word == "FROM":
            result.append([])
        if result:
            result[-1].append((word, rest))
    return result


def test_multi_stage_with_pinned_bases():
    all_stages = stages()
    assert len(all_stages) >= 2
    names = [re.search(r"\bAS\s+(\S+)", s[0][1], re.IGNORECASE) for s in all_stages]
    assert names[0] and names[0].group(1) == "builder"
    args = dict(rest.split("=", 1) for word, rest in instructions() if word == "ARG" and "=" in rest)
    base = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.1[1-9]-slim(-\w+)?", base), base
    final = all_stages[-1]
    assert any(w == "COPY" and "--from=builder" in r for w, r in final)
    assert not any(w in ("RUN",) and "pip install" in r for w, r in final), "no build tools in the runtime"


def test_runs_as_non_root():
    final = stages()[-1]
    users = [r for w, r in final if w == "USER"]
    assert users, "the runtime stage must set USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) >= 10000, "numeric non-root uid (runAsNonRoot can verify it)"
    assert uid == "10001"


def test_entrypoint_serves_the_config():
    final = dict((w, r) for w, r in stages()[-1])
    assert json.loads(final["ENTRYPOINT"]) + json.loads(final["CMD"]) == [
        "kvgate", "serve", "--config", "/etc/kvgate/config.toml"]
    assert "HEALTHCHECK" in final and "/health" in final["HEALTHCHECK"]
    assert "PYTHONDONTWRITEBYTECODE=1" in final["ENV"], "read-only root filesystem: no .pyc writes"


def test_context_filter_keeps_what_the_build_copies():
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
    rules = [line for line in ignore if line and not line.startswith("#")]
    assert rules[0] == "*", "exclude everything, then re-include what the build needs"
    for path in ("pyproject.toml", "setup.py", "README.md", "gateway/", "backends/", "deploy/docker/config.toml"):
        assert f"!{path}" in ignore, path
        assert (REPO / path).exists(), path


def test_the_builder_compiles_the_native_lru():
    """setup.py's extensions (gateway/prefix/_lru.c, _chain.c) need a C compiler in the builder, and the
    build checks that the installed wheel imports it; no local .so enters the context."""
    builder = stages()[0]
    assert any(w == "RUN" and "apt-get install" in r and "gcc" in r for w, r in builder)
    assert any(w == "COPY" and "setup.py" in r.split() for w, r in builder)
    assert any(w == "RUN" and "import gateway.prefix._lru, gateway.prefix._chain" in r for w, r in builder)
    assert "**/*.so" in (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()


def test_baked_config_loads(monkeypatch):
    for name in [n for n in os.environ if n.startswith("KVGATE__")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("KVGATE__AUTH__API_KEYS", '["sk-image-test"]')
    settings = build_settings(tomllib.loads((DOCKER / "config.toml").read_text()))
    assert settings.server.host == "0.0.0.0" and settings.server.port == 8080
