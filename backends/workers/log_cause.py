"""The root cause of a worker's failure, as its log names it. Pure.

A vLLM worker that fails at start-up logs several tracebacks: the EngineCore's own (the cause),
then the same again as ``Process EngineCore_DP0`` dies, then the API server's wrapper
(``RuntimeError: Engine core initialization failed. See root cause above.``). The tail of the
log shows only the wrapper. :func:`root_cause` reads the whole text instead:

1. strip the prefixes vLLM puts on every line (``(EngineCore_DP0 pid=7) `` and the logging
   header ``ERROR 12-01 10:00:00 [core.py:708] ``);
2. find each ``Traceback (most recent call last):`` block; its exception line is the first line
   after it that is not a frame (indented) and not a chaining sentence;
3. the cause is the first block's exception whose message is not a wrapper that points elsewhere
   ("See root cause above"), with its innermost frame (``File "...", line N, in f`` and the
   source line): the few lines that name it.

Without any traceback there is no cause to name (None), and callers show the log's tail.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_PROCESS_PREFIX = re.compile(r"^\((?:[A-Za-z_][\w.-]*) pid=\d+\)\s?")
_LOG_HEADER = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[^\]]*\] ?")
_EXCEPTION = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Failure|Fault)?(?::|$)")
_WRAPPERS = ("see root cause above", "engine core initialization failed", "check the stack trace above")


@dataclass(frozen=True, slots=True)
class RootCause:
    """The exception line and the frame that raised it (``frame`` may be empty)."""

    exception: str
    frame: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        return [self.exception, *(f"  {line.strip()}" for line in self.frame)]


def strip_prefixes(line: str) -> str:
    """``line`` without vLLM's process tag and logging header."""
    line = _PROCESS_PREFIX.sub("", line)
    return _LOG_HEADER.sub("", line)


def exceptions(text: str) -> list[RootCause]:
    """Every traceback's exception in ``text``, in order, each with its innermost frame."""
    lines = [strip_prefixes(line.rstrip()) for line in text.splitlines()]
    found = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("Traceback (most recent call last):"):
            i += 1
            continue
        frame: list[str] = []
        i += 1
        while i < len(lines) and (lines[i].startswith((" ", "\t")) or not lines[i]):
            if lines[i].lstrip().startswith("File "):
                frame = [lines[i]]
            elif frame and len(frame) < 2 and lines[i].strip() and set(lines[i].strip()) - set("^~ "):
                frame.append(lines[i])
            i += 1
        if i < len(lines) and _EXCEPTION.match(lines[i]):
            found.append(RootCause(lines[i], tuple(frame)))
    return found


def root_cause(text: str) -> RootCause | None:
    """The first traceback's exception in ``text`` that is not a wrapper; None without any."""
    found = exceptions(text)
    for cause in found:
        if not any(w in cause.exception.lower() for w in _WRAPPERS):
            return cause
    return found[0] if found else None
