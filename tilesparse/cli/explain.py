"""``python -m tilesparse explain SPEC_JSON``: compile a spec and show what it does on random
inputs: the plan, tile statistics per head group, and a tile map of each group's first head."""

from __future__ import annotations

import argparse

from .. import NoBackendError, compile, parse_spec
from ..ir import to_string
from .inputs import add_input_arguments, criteria_generator, random_inputs
from .report import TILE_LEGEND, make_console, tile_stats_of, tile_table

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="compile a spec (JSON) and show its plan and tiles on random inputs",
        description="Compile SPEC_JSON and show its plan, tile statistics and tile maps on random q, k, v.",
    )
    parser.add_argument("spec", metavar="SPEC_JSON", help="""a spec as JSON, e.g. '{"kind": "hash", "buckets": 16}'""")
    parser.add_argument(
        "--causal", action=argparse.BooleanOptionalAction, default=True, help="causal attention (default: causal)"
    )
    parser.add_argument(
        "--backend", default="auto", help="auto, reference, executor, sdpa, triton (default: %(default)s)"
    )
    parser.add_argument(
        "--grad", action="store_true", help="inputs require gradients: plan for forward + backward (default: forward)"
    )
    add_input_arguments(parser, seqlen=512, heads=2, head_dim=64)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    console, errors = make_console(), make_console(stderr=True)
    try:
        spec = parse_spec(args.spec)
    except ValueError as e:  # pydantic's ValidationError is a ValueError
        errors.print(f"error: SPEC_JSON {args.spec!r} is not a valid spec:\n{e}")
        return 2
    q, k, v = random_inputs(args, requires_grad=args.grad)
    try:
        attn = compile(spec, causal=args.causal, backend=args.backend)
        decisions = attn.decide(q, k, generator=criteria_generator(args))
        plan = attn.explain(q, k, v, decisions=decisions)
        prepared = attn.prepare(q, k, v, decisions=decisions)
    except (ValueError, TypeError, NoBackendError) as e:
        errors.print(f"error: {e}")
        return 2
    console.print(f"spec: {spec.model_dump_json()}")
    console.print(plan)
    console.print(tile_table(prepared, tile_stats_of(prepared)))
    console.print(TILE_LEGEND)
    for g in prepared.groups:
        console.print(to_string(g, head=0))
    return 0
