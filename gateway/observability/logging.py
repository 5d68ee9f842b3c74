"""Structured logs: one JSON object per line on stderr, with the request id when there is one.

:func:`configure_logging` installs :class:`JsonFormatter` (or a plain text format) on the root
logger; uvicorn's loggers propagate to it (``kvgate serve`` starts uvicorn with
``log_config=None`` and without its own access log). Every record carries ``ts`` (UTC, ISO 8601
with milliseconds), ``level``, ``logger`` and ``message``; fields given as
``extra={"fields": {...}}`` are merged in, and an exception adds ``exc_info`` text.

The access log (``server.access_log = true``) is written by ``gateway/api/access.py`` with
``request_id``, method, path, status, duration and, for inference, model, route, cluster,
endpoint, outcome, key id (never the secret) and token counts. Prompts and completions appear
only with ``logging.log_payloads = true`` (first 4 KiB of each body). Headers, and so keys, are
never logged.

Repeated lines are rate-limited (:class:`RepeatFilter`, on the handler
:func:`configure_logging` installs): a warning or error with the same logger and message
template as one written less than :data:`REPEAT_WINDOW_S` seconds ago is dropped and counted;
the next one written says how many were suppressed (``suppressed`` field). An outage of a
dependency (Redis, an endpoint) then writes a line per window, not one per request.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

REPEAT_WINDOW_S = 10.0
"""A warning/error line repeated within this many seconds is suppressed (and counted)."""
_MAX_TEMPLATES = 1024


class RepeatFilter(logging.Filter):
    """Drops a WARNING or ERROR whose (logger, level, message template) was let through less than
    ``window_s`` ago; the next one let through carries ``suppressed`` (how many were dropped, also
    appended to its message). Lower levels pass untouched. Remembers at most 1,024 templates."""

    def __init__(self, window_s: float = REPEAT_WINDOW_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window_s = window_s
        self._clock = clock
        self._seen: dict[tuple[str, int, str], tuple[float, int]] = {}  # -> (last let through, dropped since)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        key = (record.name, record.levelno, str(record.msg))
        now = self._clock()
        last = self._seen.get(key)
        if last is not None and now - last[0] < self.window_s:
            self._seen[key] = (last[0], last[1] + 1)
            return False
        if len(self._seen) >= _MAX_TEMPLATES:
            self._seen.clear()
        self._seen[key] = (now, 0)
        if last is not None and last[1]:
            fields = getattr(record, "fields", None)
            record.fields = {**(fields if isinstance(fields, dict) else {}), "suppressed": last[1]}
            record.msg = f"{record.msg} ({last[1]} similar suppressed in the last {self.window_s:g} s)"
        return True


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            payload.update(fields)
        if record.exc_info:
            payload["exc_info"] = self.formatException(record.exc_info)
        return orjson.dumps(payload, default=str).decode()


class TextFormatter(logging.Formatter):
    """``TIME LEVEL LOGGER: MESSAGE`` and then the record's fields as ``key=value`` (access lines keep
    their request id, route and tokens in text format too); values with spaces are quoted."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = getattr(record, "fields", None)
        if not isinstance(fields, dict) or not fields:
            return line
        pairs = " ".join(f"{name}={_text_value(value)}" for name, value in fields.items() if value is not None)
        return f"{line} {pairs}" if pairs else line


def _text_value(value: Any) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value, default=str).decode()
    return orjson.dumps(text).decode() if (" " in text or not text) and isinstance(value, str) else text


def configure_logging(log_format: str = "json", level: str = "info", *, root: logging.Logger | None = None) -> None:
    """Send every log record to stderr as JSON (or text) at ``level``; replaces root handlers."""
    target = root or logging.getLogger()
    handler = logging.StreamHandler()
    handler.addFilter(RepeatFilter())
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter())
    for old in list(target.handlers):
        target.removeHandler(old)
    target.addHandler(handler)
    target.setLevel(_LEVELS.get(level, logging.INFO))
    if root is None:  # the process-wide setup: uvicorn's loggers go through the root handler
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
            logging.getLogger(name).handlers.clear()
            logging.getLogger(name).propagate = True
