"""``python -m tilesparse plot``: figures, as PNG.

- ``plot RESULTS_JSON [--out PNG]``: a benchmark run's speed-up over SDPA flash against T per
  pattern, ours solid and FlexAttention (block mask prebuilt) dashed, one panel per head dim
  (:func:`tilesparse.bench.plot.plot`).
- ``plot --tile-map SPEC_JSON [--seqlen T] [--heads H] [--seed S] [--out PNG]``: a pattern's
  element mask (original and layout order) and tile map per head, for decisions drawn on
  random inputs with that seed (:func:`tilesparse.bench.tile_map.plot_tile_map`).

A training run's JSON (``examples/train_lm.py``) has its own figure: ``python
examples/train_lm.py --plot RESULTS_JSON``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .inputs import add_input_arguments
from .report import make_console

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plot",
        help="draw a benchmark's speed-ups (RESULTS_JSON) or a pattern's tile map (--tile-map SPEC_JSON)",
        description=__doc__.split("\n\n", 1)[1].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("results", nargs="?", metavar="RESULTS_JSON", help="a benchmark run's JSON")
    parser.add_argument("--tile-map", metavar="SPEC_JSON", help="""a spec as JSON, e.g. '{"kind": "hash", "buckets": 16}'""")
    parser.add_argument("--out", metavar="PNG", help="the figure (default: RESULTS_JSON with .png, or tile-map.png)")
    tile_map = parser.add_argument_group("--tile-map")
    tile_map.add_argument(
        "--causal", action=argparse.BooleanOptionalAction, default=True, help="causal attention (default: causal)"
    )
    tile_map.add_argument(
        "--backend", default="executor", help="whose tiling is drawn (default: %(default)s, runs on CPU)"
    )
    add_input_arguments(parser, seqlen=1024, heads=2, head_dim=64, shape_only=True)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    console, errors = make_console(), make_console(stderr=True)
    if (args.results is None) == (args.tile_map is None):
        errors.print("error: give either RESULTS_JSON or --tile-map SPEC_JSON (see plot --help)")
        return 2
    try:
        png = _tile_map(args) if args.tile_map is not None else _speedups(args)
    except (OSError, ValueError, TypeError) as e:  # pydantic's ValidationError and json's errors are ValueErrors
        errors.print(f"error: {e}")
        return 2
    console.print(f"png: {png}")
    return 0


def _speedups(args: argparse.Namespace) -> Path:
    from ..bench.plot import plot  # matplotlib: only when asked

    results = json.loads(Path(args.results).read_text())
    if not isinstance(results, dict) or "rows" not in results:
        script = results.get("meta", {}).get("script") if isinstance(results, dict) else None
        hint = f"; a training run's: python {script} --plot {args.results}" if script else ""
        raise ValueError(f"{args.results} is not a benchmark run's JSON (no 'rows'){hint}")
    return plot(results, args.out or Path(args.results).with_suffix(".png"))


def _tile_map(args: argparse.Namespace) -> Path:
    from ..bench.tile_map import plot_tile_map  # matplotlib: only when asked

    return plot_tile_map(
        args.tile_map, args.out or "tile-map.png", seqlen=args.seqlen, heads=args.heads, head_dim=args.head_dim,
        causal=args.causal, seed=args.seed, backend=args.backend,
    )  # fmt: skip
