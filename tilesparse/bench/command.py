"""The benchmark's command line: ``python -m tilesparse bench`` and ``benchmarks/bench_attention.py``.

Results go to ``--out`` (default: ``attention-<grid>-<date>.json`` in the working directory),
the figure next to them, a table per mode to stdout.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Sequence
from pathlib import Path

from .attention import run
from .grid import FLEX_DEFAULT_D, FLEX_DEFAULT_MAX_T, FLEX_DEFAULT_PATTERNS, GRIDS, LONG_D, LONG_PATTERN, LONG_T, MODES, PATTERNS
from .table import print_table

__all__ = ["build_parser", "main"]


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The benchmark's options."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Time tilesparse against SDPA flash/cuDNN and FlexAttention "
        "(tilesparse.bench.attention's docstring says what is timed and how).",
    )
    parser.add_argument("--grid", choices=sorted(n for n, g in GRIDS.items() if g.kv_heads is None), default="full", help="sizes, patterns (default: %(default)s)")
    parser.add_argument("--d", help="head dims, comma-separated (default: the grid's)")
    parser.add_argument("--t", help="sequence lengths, comma-separated (default: the grid's)")
    parser.add_argument("--patterns", help=f"comma-separated, from {','.join(PATTERNS)} (default: the grid's)")
    parser.add_argument("--b", type=int, help="batch (default: the grid's)")
    parser.add_argument("--h", type=int, help="heads (default: the grid's)")
    parser.add_argument(
        "--long", action=argparse.BooleanOptionalAction, default=None,
        help=f"the T={LONG_T} row ({LONG_PATTERN}, D={LONG_D}, fwd+bwd vs SDPA flash; default: full and targets)",
    )  # fmt: skip
    parser.add_argument("--modes", default=",".join(MODES), help="fwd, fwd_bwd or both (default: %(default)s)")
    parser.add_argument("--decide", choices=("both", "excluded", "included"), default="both")
    parser.add_argument(
        "--flex", choices=("all", "default", "none"), default="default",
        help=f"default: --flex-patterns at D={FLEX_DEFAULT_D} and --flex-t on CUDA",
    )  # fmt: skip
    parser.add_argument(
        "--flex-patterns", help=f"patterns Flex runs with --flex default (default: {','.join(FLEX_DEFAULT_PATTERNS)})"
    )
    parser.add_argument("--flex-t", help=f"T values Flex runs with --flex default (default: every T <= {FLEX_DEFAULT_MAX_T})")
    parser.add_argument("--out", help="JSON path (default: attention-<grid>-<date>.json in the working directory)")
    parser.add_argument("--png", help="plot path (default: the JSON path with .png)")
    parser.add_argument("--warmup-ms", type=float, default=10.0, help="CUDA: do_bench's warm-up (default: %(default)s)")
    parser.add_argument("--rep-ms", type=float, default=40.0, help="CUDA: do_bench's timed span (default: %(default)s)")
    parser.add_argument("--min-reps", type=int, default=5, help="CUDA: timed calls at least (default: %(default)s)")
    parser.add_argument("--cpu-reps", type=int, default=3, help="timed calls on the CPU")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--validate", action="store_true", help="compile with validate=True (given ids checked on the device)")
    parser.add_argument("--cuda-graphs", action="store_true", help="compile ours with cuda_graphs=True (calls replayed)")
    parser.add_argument("--budget-s", type=float, default=520.0, help="start no new work after this (0: no limit)")
    parser.add_argument("--ideal-max-t", type=int, default=16384, help="largest T for the exact ideal fraction")
    parser.add_argument("--device", help="cuda, cuda:1 or cpu (default: cuda when available)")
    return parser


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Parse ``argv``, run the grid, write the JSON and figure, print the tables."""
    args = build_parser(prog).parse_args(argv)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path.cwd() / f"attention-{args.grid}-{stamp}.json"
    results = run(
        args.grid, head_dims=args.d, seqlens=args.t, patterns=args.patterns, batch=args.b, heads=args.h,
        long_row=args.long, modes=args.modes, decide=args.decide, flex=args.flex, flex_patterns=args.flex_patterns,
        flex_seqlens=args.flex_t, out=out, png=args.png, warmup_ms=args.warmup_ms, rep_ms=args.rep_ms,
        min_reps=args.min_reps, cpu_reps=args.cpu_reps, seed=args.seed, validate=args.validate, budget_s=args.budget_s or None,
        cuda_graphs=args.cuda_graphs,
        ideal_max_t=args.ideal_max_t, device=args.device,
    )  # fmt: skip
    meta = results["meta"]
    print(f"json: {meta.get('json')}  png: {meta.get('png', meta.get('png_error'))}  ({meta['elapsed_s']} s)")
    sys.stdout.flush()
    print_table(results)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
