"""The shape of the house: layers of ``gateway/``, module sizes and docstrings, read from the source.

The gateway is built in layers, bottom to top; a module may import from its own layer or a
lower one, never from a higher one:

- **L0, the ground**: ``gateway`` (the version), ``gateway.errors`` (one error tree),
  ``gateway.config`` (the settings tree; it imports nothing of kvgate but ``gateway.errors``),
  ``gateway.deadlines`` and ``gateway.turns``.
- **L1, vocabulary and stores**: ``gateway.protocol`` (what kvgate reads of each API),
  ``gateway.prefix`` (prompt hashing and the prefix index), ``gateway.observability.metrics``
  (every instrument), ``gateway.state`` (the shared state store) and ``gateway.keys`` (API
  keys, quotas, prices; keys may use state).
- **L2, the endpoints and the wire**: ``gateway.endpoints`` (specs, snapshots, health, circuit,
  scraping) and ``gateway.upstream`` (the HTTP transport only).
- **L3, decisions**: ``gateway.scheduling`` (which endpoint), ``gateway.selection`` (which
  cluster), ``gateway.failover`` and ``gateway.continuation`` (what if it fails), and the rest of
  ``gateway.observability`` (tracing, logging, the request log, stats).
- **L4, one request's parts**: ``gateway.attempt``, ``gateway.relay``, ``gateway.closeout``,
  ``gateway.exchange``.
- **L5, the director and the running gateway**: ``gateway.proxy`` (and ``gateway.api_director``, the other APIs), ``gateway.operations``,
  ``gateway.live_config``, ``gateway.process_pool``.
- **L6, the doors**: ``gateway.api``, ``gateway.app``, ``gateway.cli``.

A module belongs to the layer of the longest dotted prefix in :data:`LAYERS`. Every import
counts: at module level, inside functions (lazy imports) and under ``if TYPE_CHECKING:`` (a
type-only import upward is still a dependency on a concept above). ``backends/`` is below the
gateway: it never imports ``gateway``.

Also checked: every module of ``gateway/`` is covered by the table; every Prometheus instrument
is defined in ``gateway.observability.metrics`` (no other module imports one); no module of ``gateway/``
or ``backends/`` is over :data:`MAX_LINES` lines; every non-empty module starts with a
docstring saying what it owns.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

MAX_LINES = 450

LAYERS: dict[str, int] = {
    "gateway": 0,
    "gateway.errors": 0,
    "gateway.config": 0,
    "gateway.deadlines": 0,
    "gateway.turns": 0,  # the event loop's heavy steps, one per turn (imports nothing of kvgate)
    "gateway.protocol": 1,
    "gateway.prefix": 1,
    "gateway.observability.metrics": 1,
    "gateway.observability.tally": 1,  # the instruments' per-request updates, folded at scrape time
    "gateway.state": 1,
    "gateway.keys": 1,
    "gateway.endpoints": 2,
    "gateway.upstream": 2,
    "gateway.scheduling": 3,
    "gateway.selection": 3,
    "gateway.admission": 3,
    "gateway.failover": 3,
    "gateway.continuation": 3,
    "gateway.observability": 3,
    "gateway.attempt": 4,
    "gateway.relay": 4,
    "gateway.closeout": 4,
    "gateway.exchange": 4,
    "gateway.background_usage": 4,  # background Responses settled when they end (polls their endpoint)
    "gateway.proxy": 5,
    "gateway.api_director": 5,
    "gateway.operations": 5,
    "gateway.live_config": 5,
    "gateway.process_pool": 5,
    "gateway.api": 6,
    "gateway.app": 6,
    "gateway.cli": 6,
}

# Every instrument is defined once, in this module (names and labels are checked by tests and dashboards).
INSTRUMENTS_MODULE = "gateway.observability.metrics"
INSTRUMENT_TYPES = frozenset({
    "Counter", "Gauge", "Histogram", "Summary", "Info", "Enum",
    "CounterMetricFamily", "GaugeMetricFamily", "HistogramMetricFamily", "SummaryMetricFamily",
})

# gateway.config is the bottom of the house: of kvgate it may import only these.
CONFIG_MAY_IMPORT = ("gateway.config", "gateway.errors")


def module_name(path: Path) -> str:
    """``gateway/api/edge.py`` -> ``gateway.api.edge``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> int | None:
    """The layer of the longest prefix of ``module`` in :data:`LAYERS`; None if none covers it.

    The bare ``gateway`` entry covers only the package itself, not every module below it.
    """
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in LAYERS and (prefix != "gateway" or module == "gateway"):
            return LAYERS[prefix]
    return None


def imports_of(path: Path) -> list[tuple[int, str]]:
    """``(line, imported module or module.name)`` for every import in ``path``, relative ones resolved."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            # ``from gateway.x import y``: y may be a module (gateway.x.y) or a name of gateway.x;
            # layer_of's longest-prefix match gives the right layer either way.
            found.extend((node.lineno, f"{origin}.{alias.name}") for alias in node.names)
    return found


def sources(*roots: str) -> list[Path]:
    return sorted(path for root in roots for path in (ROOT / root).rglob("*.py"))


def upward_imports() -> list[str]:
    """Every import in ``gateway/`` to a higher layer, as ``module (Ln) line N -> target (Lm)``."""
    found = []
    for path in sources("gateway"):
        module = module_name(path)
        own = layer_of(module)
        if own is None:
            continue  # reported by test_every_gateway_module_has_a_layer
        for line, target in imports_of(path):
            if target == "gateway" or target.startswith("gateway."):
                theirs = layer_of(target)
                if theirs is not None and theirs > own:
                    found.append(f"{module} (L{own}) line {line} -> {target} (L{theirs})")
    return found


def test_every_gateway_module_has_a_layer() -> None:
    uncovered = [module_name(path) for path in sources("gateway") if layer_of(module_name(path)) is None]
    assert uncovered == [], f"modules of gateway/ not in LAYERS (add them to the table): {uncovered}"


def test_no_import_goes_to_a_higher_layer() -> None:
    found = upward_imports()
    assert found == [], "imports to a higher layer:\n  " + "\n  ".join(found)


def test_config_imports_nothing_of_kvgate_above_errors() -> None:
    found = [
        f"{module_name(path)} line {line} -> {target}"
        for path in sources("gateway/config")
        for line, target in imports_of(path)
        if target.split(".")[0] in ("gateway", "backends") and not target.startswith(CONFIG_MAY_IMPORT)
    ]
    assert found == [], "gateway.config imports above gateway.errors:\n  " + "\n  ".join(found)


def test_backends_never_import_the_gateway() -> None:
    found = [
        f"{module_name(path)} line {line} -> {target}"
        for path in sources("backends")
        for line, target in imports_of(path)
        if target == "gateway" or target.startswith("gateway.")
    ]
    assert found == [], "backends/ imports the gateway:\n  " + "\n  ".join(found)


def test_every_instrument_is_defined_in_observability_metrics() -> None:
    found = [
        f"{module_name(path)} line {line} -> {target}"
        for path in sources("gateway")
        if module_name(path) != INSTRUMENTS_MODULE
        for line, target in imports_of(path)
        if target.startswith("prometheus_client") and target.rpartition(".")[2] in INSTRUMENT_TYPES
    ]
    assert found == [], f"Prometheus instruments outside {INSTRUMENTS_MODULE}:\n  " + "\n  ".join(found)


def test_no_module_is_over_the_size_limit() -> None:
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sources("gateway", "backends")
    }
    over = sorted(f"{name}: {lines} lines" for name, lines in sizes.items() if lines > MAX_LINES)
    assert over == [], f"modules over {MAX_LINES} lines (split them by concept): {over}"


def test_every_module_starts_with_a_docstring() -> None:
    missing = []
    for path in sources("gateway", "backends"):
        text = path.read_text(encoding="utf-8")
        if text.strip() and ast.get_docstring(ast.parse(text)) is None:
            missing.append(str(path.relative_to(ROOT)))
    assert missing == [], f"modules without a docstring saying what they own: {missing}"


# -- the checker itself ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("module", "layer"),
    [
        ("gateway", 0),
        ("gateway.config.server", 0),
        ("gateway.observability.metrics", 1),
        ("gateway.observability.tracing", 3),
        ("gateway.api.edge", 6),
        ("gateway.newthing", None),
    ],
)
def test_layer_of_takes_the_longest_prefix(module: str, layer: int | None) -> None:
    assert layer_of(module) == layer


def test_imports_of_sees_lazy_relative_and_type_checking_imports(tmp_path: Path) -> None:
    package = tmp_path / "gateway" / "state"
    package.mkdir(parents=True)
    (package / "probe.py").write_text(
        '"""Probe."""\n'
        "from typing import TYPE_CHECKING\n"
        "from . import base\n"
        "from ..proxy import Proxy\n"
        "if TYPE_CHECKING:\n"
        "    from gateway.api import edge\n"
        "def later():\n"
        "    import gateway.relay\n"
    )
    globals()["ROOT"] = tmp_path
    try:
        targets = [target for _, target in imports_of(package / "probe.py")]
    finally:
        globals()["ROOT"] = Path(__file__).resolve().parents[1]
    assert sorted(targets) == ["gateway.api.edge", "gateway.proxy.Proxy", "gateway.relay", "gateway.state.base", "typing.TYPE_CHECKING"]
    assert [layer_of(target) for target in sorted(targets)[:4]] == [6, 5, 4, 1]
