"""The ``python -m tilesparse`` command line.

One module per subcommand. Each defines ``add_parser(subparsers)``, which adds its parser and
sets ``run`` to a function ``(args) -> int`` returning the exit status; :data:`COMMANDS` lists
them in the order ``--help`` shows. A new subcommand is one module and one entry there. A
subcommand that sets ``passthrough=True`` gets the arguments it does not know in
``args.extra`` (``bench`` hands them to the benchmark engine); the others reject them.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from . import bench, demo, explain, plot

__all__ = ["COMMANDS", "build_parser", "main"]

COMMANDS = (demo, explain, bench, plot)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand of :data:`COMMANDS` added."""
    parser = argparse.ArgumentParser(
        prog="python -m tilesparse",
        description="tilesparse: a compiler for exact dynamic sparse attention.",
    )
    subparsers = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's arguments) and run the chosen subcommand."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "passthrough", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.extra = extra
    return args.run(args)
