"""``python -m tilesparse`` and the ``tilesparse`` command: the command line (subcommands live
in :mod:`tilesparse.cli`, which needs the ``cli`` extra: ``pip install 'tilesparse[cli]'``)."""

import sys


def main() -> int:
    """Run the command line; without the ``cli`` extra, say which packages it needs."""
    try:
        from .cli import main as cli_main
    except ModuleNotFoundError as e:  # tilesparse.cli names the extra in its message
        if e.name not in ("rich", "matplotlib"):
            raise
        print(f"error: {e}", file=sys.stderr)
        return 1
    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
