"""The chart passes `helm lint --strict` and strict Kubernetes schema validation for every
supported install (helm/kvgate/ci/*-values.yaml), and every negative values file
(tests/deploy/bad-values/) fails both lint and rendering, for the reason its header names."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import POSITIVE_VALUES
from .tools import (
    BAD_VALUES,
    CHART,
    CI_VALUES,
    KUBERNETES_VERSION,
    NAMESPACE,
    RELEASE,
    helm_lint,
    helm_template,
    output,
    run,
    tool,
)

NEGATIVE_VALUES = sorted(BAD_VALUES.glob("*.yaml"))


def _ids(paths: list[Path]) -> list[str]:
    return [p.stem for p in paths]


def test_the_three_installs_are_covered():
    assert {p.name for p in POSITIVE_VALUES} >= {
        "default-values.yaml",
        "multi-replica-external-redis-values.yaml",
        "gpu-values.yaml",
    }


@pytest.mark.parametrize("values", POSITIVE_VALUES, ids=_ids(POSITIVE_VALUES))
def test_lint_strict_passes(values: Path):
    result = helm_lint([values])
    assert result.returncode == 0, output(result)


@pytest.mark.parametrize("values", POSITIVE_VALUES, ids=_ids(POSITIVE_VALUES))
def test_manifests_validate_against_kubernetes_schemas(values: Path, rendered):
    manifests = rendered(values).text
    result = run(
        [tool("kubernetes-validate"), "--strict", "-k", KUBERNETES_VERSION, "--quiet", "-"],
        stdin=manifests,
    )
    assert result.returncode == 0, output(result)
    assert "ERROR" not in result.stdout + result.stderr, output(result)


def _expectation(values: Path) -> str:
    first = values.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{values.name}: first line must be '# expect: <text>'"
    return first.removeprefix("# expect: ").strip()


def test_negative_values_exist():
    assert len(NEGATIVE_VALUES) >= 4


@pytest.mark.parametrize("values", NEGATIVE_VALUES, ids=_ids(NEGATIVE_VALUES))
def test_negative_values_fail_lint(values: Path):
    result = helm_lint([values])
    assert result.returncode != 0, f"{values.name} passed lint:\n{output(result)}"
    assert _expectation(values) in result.stdout + result.stderr, output(result)


@pytest.mark.parametrize("values", NEGATIVE_VALUES, ids=_ids(NEGATIVE_VALUES))
def test_negative_values_fail_to_render(values: Path):
    result = helm_template([values])
    assert result.returncode != 0, f"{values.name} rendered:\n{output(result)}"
    assert _expectation(values) in result.stderr, output(result)


def test_notes_tell_how_to_create_the_client_keys_secret():
    result = run([tool("helm"), "install", RELEASE, str(CHART), "--namespace", NAMESPACE,
                  "--dry-run=client", "-f", str(CI_VALUES / "gpu-values.yaml")])
    assert result.returncode == 0, output(result)
    notes = result.stdout.split("NOTES:", 1)[1]
    assert f"kubectl -n {NAMESPACE} create secret generic kvgate-client-keys" in notes
    assert "StatefulSet kvgate-worker-reasoning" in notes
