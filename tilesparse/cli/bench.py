"""``python -m tilesparse bench [--quick] [OPTIONS]``: the benchmark grid of
:mod:`tilesparse.bench.attention` (tilesparse against SDPA flash/cuDNN and FlexAttention;
its options: :mod:`tilesparse.bench.command`).

``--quick`` is ``--grid quick``: tiny sizes that run on the CPU in seconds (the Triton kernels
in their interpreter under ``TRITON_INTERPRET=1``, else the reference backend); every other
option goes to the benchmark engine as it is (``--grid``, ``--t``, ``--patterns``, ``--out``,
...: ``bench --help`` lists them). A progress bar runs on stderr, the JSON (default: in the
working directory) and its figure are rewritten as rows come in, and a table per mode is
printed at the end.
"""

from __future__ import annotations

import argparse

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    # no help of its own: -h reaches the engine, whose parser knows every option
    parser = subparsers.add_parser(
        "bench",
        add_help=False,
        help="time patterns against SDPA and FlexAttention (--quick: CPU-sized; bench --help: the options)",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    parser.add_argument("--quick", action="store_true", help="the quick grid: --grid quick")
    parser.set_defaults(run=run, passthrough=True)


def run(args: argparse.Namespace) -> int:
    from ..bench import command  # torch's attention modules, matplotlib: only when asked
    from . import program_name

    argv = list(args.extra)
    if args.quick:
        argv = ["--grid", "quick", *argv]
    if "-h" in argv or "--help" in argv:
        print(f"{program_name()} bench [--quick] [OPTIONS]: --quick is --grid quick; the OPTIONS:\n")
    return command.main(argv, prog=f"{program_name()} bench")
