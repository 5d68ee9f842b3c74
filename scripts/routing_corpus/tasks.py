"""A task of the corpus: its label, its material and its ask templates (see ``asks.py``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    name: str
    needs_reasoning: bool
    material: str | None
    templates: tuple[tuple[str, str], ...]  # (lang, text)
    json_mode: bool = False


def make_task(name: str, needs: bool, material: str | None, text: str, json_mode: bool = False) -> Task:
    """A :class:`Task` from template lines ``LANG: text`` (``\\n`` in a line is a newline)."""
    lines = []
    for raw in text.strip().splitlines():
        raw = raw.strip()
        if raw:
            lang, _, body = raw.partition(":")
            lines.append((lang.strip(), body.strip().replace("\\n", "\n")))
    return Task(name, needs, material, tuple(lines), json_mode)
