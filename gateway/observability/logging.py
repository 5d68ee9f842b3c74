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
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import orjson

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


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


def configure_logging(log_format: str = "json", level: str = "info", *, root: logging.Logger | None = None) -> None:
    """Send every log record to stderr as JSON (or text) at ``level``; replaces root handlers."""
    target = root or logging.getLogger()
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for old in list(target.handlers):
        target.removeHandler(old)
    target.addHandler(handler)
    target.setLevel(_LEVELS.get(level, logging.INFO))
    if root is None:  # the process-wide setup: uvicorn's loggers go through the root handler
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
            logging.getLogger(name).handlers.clear()
            logging.getLogger(name).propagate = True
