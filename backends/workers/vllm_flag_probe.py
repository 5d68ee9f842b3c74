"""Check argv lists against the installed vLLM's own ``serve`` argument parser (a script).

Run by ``backends.workers.flag_check`` with the **worker venv's** python (vLLM is not importable in the
gateway's environment)::

    WORKER_PYTHON vllm_flag_probe.py < ARGV_LISTS.json

stdin holds a JSON list of argv lists, each as vLLM's ``serve`` takes it after the program name
(``["--model", "M", "--kv-cache-dtype", "fp8", ...]``). Each is run through the same steps as
vLLM's API server before it loads a model: ``make_arg_parser(FlexibleArgumentParser())``,
``parse_args`` (which also decodes JSON-valued flags such as ``--kv-events-config`` into vLLM's
config classes), ``validate_parsed_serve_args``, plus a lookup of ``--reasoning-parser`` among the
registered reasoning parsers. (``AsyncEngineArgs.from_cli_args`` is not run: it resolves the model.) One line on stdout, prefixed by
:data:`RESULT_PREFIX`, holds a JSON list of ``{"ok": bool, "error": str}`` in input order (vLLM
may log to stdout, so the prefix marks the result). Nothing is started and no model is read.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from typing import Any

RESULT_PREFIX = "KVGATE_FLAG_PROBE "


def _parser() -> Any:
    try:  # vLLM >= 0.32
        from vllm.entrypoints.launchers.cli_args import make_arg_parser  # noqa: PLC0415
    except ImportError:  # older layout
        from vllm.entrypoints.openai.cli_args import make_arg_parser  # noqa: PLC0415
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser  # noqa: PLC0415
    except ImportError:
        from vllm.utils import FlexibleArgumentParser  # noqa: PLC0415
    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


def _validate(args: Any) -> None:
    try:
        from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args  # noqa: PLC0415
    except ImportError:
        from vllm.entrypoints.openai.cli_args import validate_parsed_serve_args  # noqa: PLC0415
    validate_parsed_serve_args(args)
    parser_name = getattr(args, "reasoning_parser", None)
    if parser_name:
        from vllm.reasoning import ReasoningParserManager  # noqa: PLC0415

        known = ReasoningParserManager.list_registered()
        if parser_name not in known:
            raise ValueError(f"--reasoning-parser {parser_name!r} is not registered; known: {', '.join(known)}")


def check(parser: Any, argv: list[str]) -> dict[str, Any]:
    """``{"ok": True, "error": ""}`` if vLLM accepts ``argv``, else ``ok`` False and the reason."""
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args = parser.parse_args(argv)
        _validate(args)
    except SystemExit:
        return {"ok": False, "error": _parser_error(stderr.getvalue())}
    except Exception as exc:  # noqa: BLE001 - every rejection is reported, none raised
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True, "error": ""}


def _parser_error(stderr: str) -> str:
    """The ``PROG: error: ...`` message argparse printed (with its continuation lines)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if ": error: " in line), None)
    if start is None:
        return lines[-1] if lines else "argument parser exited"
    return " ".join(lines[start:start + 4])


def main() -> int:
    """Read the argv lists from stdin, print one result line; exit 0 (verdicts are in the line)."""
    argvs = json.load(sys.stdin)
    parser = _parser()  # built once: argparse parsers are reusable
    results = [check(parser, list(argv)) for argv in argvs]
    print(RESULT_PREFIX + json.dumps(results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
