"""Renamed config keys: an old spelling keeps working for one release, with a warning.

:data:`DEPRECATED_KEYS` maps an old dotted key path to its new one, e.g.
``{"routing.kv_events": "scheduling.kv_events"}``. :func:`apply_deprecated_keys` moves a value
found under an old spelling, in the TOML tree or in a ``KVGATE__`` environment variable
(``KVGATE__ROUTING__KV_EVENTS__ENABLED=true``), to the new path before validation, and warns
once per key with :class:`DeprecatedConfigKey` (a ``FutureWarning``, so shown by default). A
value given under both spellings: the new one wins. Remove an entry one release after adding it.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Mapping
from typing import Any

ENV_PREFIX = "KVGATE__"

DEPRECATED_KEYS: dict[str, str] = {}
"""Old dotted key path -> new dotted key path (one release of grace; empty while nothing is renamed)."""


class DeprecatedConfigKey(FutureWarning):
    """A config key was given under its old spelling; the message names the new one."""


def apply_deprecated_keys(
    data: Mapping[str, Any],
    environ: Mapping[str, str] | None = None,
    renames: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A copy of the TOML tree ``data`` with every old-spelling key moved to its new path.

    Args:
        data: the parsed TOML tree (not modified).
        environ: the environment (default ``os.environ``); ``KVGATE__`` variables under an old
            spelling are copied into the tree at the new path (their value parsed as JSON when it
            is a JSON list or table), so they still override the TOML file.
        renames: old -> new dotted paths (default :data:`DEPRECATED_KEYS`).
    """
    renames = DEPRECATED_KEYS if renames is None else renames
    tree = _copy(data)
    if not renames:
        return tree
    env = os.environ if environ is None else environ
    for old, new in renames.items():
        found = _pop(tree, old.split("."))
        if found is not _MISSING:
            _warn(old, new)
            _put(tree, new.split("."), found, keep_existing=True)
        for name, value in env.items():
            path = _env_path(name, old)
            if path is None:
                continue
            _warn(ENV_PREFIX + "__".join(old.upper().split(".")), ENV_PREFIX + "__".join(new.upper().split(".")))
            _put(tree, new.split(".") + path, _env_value(value), keep_existing=False)
    return tree


_MISSING = object()


def _copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return {key: _copy(value) if isinstance(value, Mapping) else value for key, value in data.items()}


def _pop(tree: dict[str, Any], path: list[str]) -> Any:
    node: Any = tree
    for part in path[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return _MISSING
    return node.pop(path[-1], _MISSING) if isinstance(node, dict) else _MISSING


def _put(tree: dict[str, Any], path: list[str], value: Any, keep_existing: bool) -> None:
    node = tree
    for part in path[:-1]:
        node = node.setdefault(part, {})
    leaf = path[-1]
    if isinstance(value, dict) and isinstance(node.get(leaf), dict):
        merged = dict(value) if keep_existing else dict(node[leaf])
        merged.update(node[leaf] if keep_existing else value)
        node[leaf] = merged
    elif not (keep_existing and leaf in node):
        node[leaf] = value


def _env_path(name: str, old: str) -> list[str] | None:
    """The path below ``old`` that the variable ``name`` sets, or None if it is not under ``old``."""
    parts = name.split("__")
    wanted = ["KVGATE", *old.upper().split(".")]
    if len(parts) < len(wanted) or [part.upper() for part in parts[: len(wanted)]] != wanted:
        return None
    return [part.lower() for part in parts[len(wanted):]]


def _env_value(value: str) -> Any:
    if value[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _warn(old: str, new: str) -> None:
    warnings.warn(
        f"config key {old!r} is deprecated and will be removed in the next release; use {new!r}",
        DeprecatedConfigKey,
        stacklevel=4,
    )


def drop_deprecated_keys(data: dict[str, Any], renames: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``data`` without any old-spelling key (the environment source's view; its values were
    already moved by :func:`apply_deprecated_keys`)."""
    for old in DEPRECATED_KEYS if renames is None else renames:
        _pop(data, old.split("."))
    return data
