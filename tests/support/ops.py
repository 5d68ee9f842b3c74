"""Helpers for the operations tests: admin headers, a settable wall clock, Redis prefixes, TOML.

:class:`WallClock` stands in for ``time.time`` in ``create_app(wall_clock=...)`` so quota windows
and usage days are fixed; several gateways may share one. :func:`redis_prefix` gives each test a
unique key prefix on the real Redis at 127.0.0.1:6379 and :func:`drop_prefix` deletes its keys.
"""

from __future__ import annotations

import uuid
from typing import Any

import redis

REDIS_URL = "redis://127.0.0.1:6379/0"
ADMIN_KEY = "adm-0123456789-secret"
CLIENT_KEY = "sk-ops-client-0123456789"
# Wednesday 2027-01-13 12:00:10 UTC: ten seconds into a minute, mid-day, mid-week, mid-month.
NOON = 1_799_841_610.0


def admin(key: str = ADMIN_KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


class WallClock:
    """A settable Unix clock."""

    def __init__(self, now: float = NOON) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def redis_prefix() -> str:
    return f"kvgate-test-{uuid.uuid4().hex[:10]}"


def drop_prefix(prefix: str) -> int:
    """Delete every Redis key under ``prefix``; how many."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        names = list(client.scan_iter(match=f"{prefix}*", count=1000))
        return int(client.delete(*names)) if names else 0
    finally:
        client.close()


def toml_config(data: dict[str, Any]) -> str:
    """A small TOML writer for test configs (tables, arrays of tables, scalars, string lists)."""
    lines: list[str] = []

    def scalar(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (int, float)):
            return repr(value)
        if isinstance(value, list):
            return "[" + ", ".join(scalar(item) for item in value) + "]"
        return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'

    def table(path: str, body: dict[str, Any]) -> None:
        simple = {k: v for k, v in body.items() if not isinstance(v, dict) and not _is_table_list(v)}
        if path:
            lines.append(f"[{path}]")
        lines.extend(f'"{key}" = {scalar(value)}' for key, value in simple.items())
        for key, value in body.items():
            child = f'{path}."{key}"' if path else f'"{key}"'
            if isinstance(value, dict):
                table(child, value)
            elif _is_table_list(value):
                for item in value:
                    lines.append(f"[[{child}]]")
                    lines.extend(f'"{k}" = {scalar(v)}' for k, v in item.items())

    table("", data)
    return "\n".join(lines) + "\n"


def _is_table_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(item, dict) for item in value)
