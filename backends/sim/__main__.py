"""``python -m backends.sim``: the ``kvgate sim`` command without the gateway's CLI."""

from __future__ import annotations

import argparse
import sys

from backends.sim.cli import add_arguments, run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kvgate sim", description="a simulated vLLM worker")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
