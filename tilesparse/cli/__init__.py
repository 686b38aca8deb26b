"""The ``python -m tilesparse`` (or ``tilesparse``) command line.

One module per subcommand. Each defines ``add_parser(subparsers)``, which adds its parser and
sets ``run`` to a function ``(args) -> int`` returning the exit status; :data:`COMMANDS` lists
them in the order ``--help`` shows. A new subcommand is one module and one entry there. A
subcommand that sets ``passthrough=True`` gets the arguments it does not know in
``args.extra`` (``bench`` hands them to the benchmark engine); the others reject them.

It prints with ``rich`` and draws with ``matplotlib``, the ``cli`` extra: importing this
package without them raises ``ModuleNotFoundError`` naming the extra to install.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib.util import find_spec

CLI_EXTRA = ("rich", "matplotlib")

for _name in CLI_EXTRA:
    if find_spec(_name) is None:
        raise ModuleNotFoundError(
            f"the tilesparse command line needs {' and '.join(CLI_EXTRA)} (missing: {_name}); "
            "install them with: pip install 'tilesparse[cli]'",
            name=_name,
        )
del _name

from . import bench, demo, explain, plot  # noqa: E402

__all__ = ["CLI_EXTRA", "COMMANDS", "build_parser", "main"]

COMMANDS = (demo, explain, bench, plot)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand of :data:`COMMANDS` added."""
    parser = argparse.ArgumentParser(
        prog=program_name(),
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


def program_name() -> str:
    """``tilesparse`` when run as the console script, else ``python -m tilesparse``."""
    return "tilesparse" if os.path.basename(sys.argv[0]) == "tilesparse" else "python -m tilesparse"
