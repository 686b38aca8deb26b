"""``python -m tilesparse``: the command line (subcommands live in :mod:`tilesparse.cli`)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
