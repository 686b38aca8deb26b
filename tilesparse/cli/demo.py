"""``python -m tilesparse demo``: every built-in pattern declared, compiled, run and checked.

Each pattern runs on small random inputs through a tile-skipping backend ("executor" by
default: the torch model of the kernels), and its output and gradients are checked against
``attn.reference`` (masked dense attention, the definition of correct). The run prints each
plan, the tiles visited and one head's tile map, then a summary table; the exit status is 1
when any check fails.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import dataclass, field

import torch
from rich.console import Console
from rich.table import Table
from torch import Tensor

from .. import Dense, Hash, Hybrid, NoBackendError, PerHead, QKDrop, TopKFeatures, compile
from ..ir import to_string, verify
from ..patterns import SpecBase
from .decode_demo import show_decode
from .inputs import add_input_arguments, criteria_generator, random_inputs
from .report import TILE_LEGEND, make_console, tile_stats_of, visited_fraction

__all__ = ["PATTERNS", "Outcome", "add_parser", "check_pattern", "run"]

# (label, spec): one of each built-in pattern
PATTERNS: tuple[tuple[str, SpecBase], ...] = (
    ("Dense", Dense()),
    ("QKDrop(0.5)", QKDrop(keep=0.5)),
    ("Hash(8)", Hash(buckets=8)),
    ("Hybrid(Hash+QKDrop)", Hybrid(parts=[Hash(buckets=8), QKDrop(keep=0.5)])),
    ("TopKFeatures(4)", TopKFeatures(k=4)),
    ("PerHead([0], Hash)", PerHead(dense_heads=[0], rest=Hash(buckets=8))),
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run every built-in pattern on random inputs and check it against the reference",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
    )
    parser.add_argument(
        "--backend", default="executor", help="the backend under test (default: %(default)s, runs on CPU)"
    )
    parser.add_argument(
        "--causal", action=argparse.BooleanOptionalAction, default=True, help="causal attention (default: causal)"
    )
    add_input_arguments(parser, seqlen=512, heads=2, head_dim=32)
    parser.set_defaults(run=run)


@dataclass
class Outcome:
    """One pattern's run: errors against the reference, tiles visited, what failed; ``refused``
    when the backend could not run the pattern at all (``failures`` then says why)."""

    label: str
    backend: str
    out_error: float = math.nan
    grad_error: float = math.nan
    visited: float = math.nan
    ideal: float = math.nan
    failures: list[str] = field(default_factory=list)
    refused: bool = False

    @property
    def status(self) -> str:
        return "refused" if self.refused else "FAILED" if self.failures else "ok"


def check_pattern(
    label: str, spec: SpecBase, q: Tensor, k: Tensor, v: Tensor, args: argparse.Namespace, console: Console
) -> Outcome:
    """Compile ``spec``, run it forward and backward, compare with the reference, print the plan
    and one head's tile map."""
    attn = compile(spec, causal=args.causal, backend=args.backend)
    decisions = attn.decide(q, k, generator=criteria_generator(args))
    out = attn(q, k, v, decisions=decisions)
    ref = attn.reference(q, k, v, decisions=decisions)
    dout = torch.randn(ref.shape, generator=torch.Generator(ref.device).manual_seed(args.seed), device=ref.device)
    grads = torch.autograd.grad(out, (q, k, v), dout.to(out.dtype))
    ref_grads = torch.autograd.grad(ref, (q, k, v), dout)

    plan = attn.plan(q, k, v)
    # each backend's tolerance is relative to the reference's largest magnitude
    atol = max(a.backend.ERROR_ATOL[q.dtype] for a in plan.assignments)
    failures = []
    out_error = _check(failures, "output", out, ref, atol)
    grad_error = max(_check(failures, f"d{n}", g, r, atol) for n, g, r in zip("qkv", grads, ref_grads, strict=True))

    prepared = attn.prepare(q, k, v, decisions=decisions)
    failures += [f"IR invariant: {e}" for e in verify(prepared.program, prepared, deep=True)]
    stats = tile_stats_of(prepared)
    if missed := sum(s["missed"] for s in stats):
        failures.append(f"{missed} skipped tiles hold kept elements")

    console.print(attn.explain(q, k, v, decisions=decisions))
    console.print(
        f"max |error| against attn.reference: output {out_error:.2e}, gradients {grad_error:.2e}"
        f" (tolerance {atol:g} x the reference's largest magnitude)"
    )
    visited, ideal = visited_fraction(stats), visited_fraction(stats, "ideal")
    dense = "dense causal" if args.causal else "dense"
    console.print(f"visited tiles: {100 * visited:.1f}% of {dense} (a perfect layout needs {100 * ideal:.1f}%)")
    console.print(to_string(prepared.groups[-1], head=0))
    for f in failures:
        console.print(f"FAILED: {f}", style="bold red")
    names = sorted({a.backend.NAME for a in plan.assignments})
    return Outcome(label, "+".join(names), out_error, grad_error, visited, ideal, failures)


def _check(failures: list[str], what: str, got: Tensor, want: Tensor, atol: float) -> float:
    """max |got - want|; a failure is recorded when it exceeds ``atol`` x max |want|."""
    got, want = got.detach().float(), want.detach().float()
    error = float((got - want).abs().max())
    bound = atol * max(float(want.abs().max()), 1e-6)
    if not error <= bound:  # also catches NaN
        failures.append(f"{what}: max |error| {error:.2e} > {bound:.2e}")
    return error


def run(args: argparse.Namespace) -> int:
    console = make_console()
    start = time.perf_counter()
    q, k, v = random_inputs(args, requires_grad=True)
    console.rule("tilesparse demo")
    console.print(
        f"q, k, v: {tuple(q.shape)} {str(q.dtype).removeprefix('torch.')} on {q.device}, "
        f"{'causal' if args.causal else 'non-causal'}\n"
        f"Each pattern runs on backend {args.backend!r} and is checked, output and gradients, against "
        "attn.reference: masked dense attention, the definition of correct (the 'reference' backend "
        f"runs the same math as an op). backend='auto' on {q.device.type} takes, per head group, the cheapest backend "
        f"that supports it by the planner's cost model.\n{TILE_LEGEND}"
    )
    outcomes = []
    for label, spec in PATTERNS:
        console.rule(f"{label}: {spec}")
        try:
            outcomes.append(check_pattern(label, spec, q, k, v, args, console))
        except NoBackendError as e:  # a forced backend that cannot run the pattern: say why, go on
            console.print(f"FAILED: {e}", style="bold red")
            outcomes.append(Outcome(label, args.backend, failures=[str(e)], refused=True))

    console.rule("decode against a KV cache")
    try:
        decode_failures = show_decode(args, q, k, v, console, atol=4e-3 if q.dtype != torch.float32 else 1e-4)
    except NoBackendError as e:
        decode_failures = [f"decode: {e}"]
    for f in decode_failures:
        console.print(f"FAILED: {f}", style="bold red")

    console.rule("summary")
    backends = ", ".join(sorted({o.backend for o in outcomes}))
    table = Table(title=f"every pattern on {backends} against attn.reference ({time.perf_counter() - start:.1f} s)")
    for name in ("pattern", "out error", "grad error", "visited %", "ideal %", "result"):
        table.add_column(name, justify="left" if name in ("pattern", "result") else "right", no_wrap=True)
    for o in outcomes:
        cells = ("-",) * 4 if o.refused else (
            f"{o.out_error:.1e}", f"{o.grad_error:.1e}", f"{100 * o.visited:.1f}", f"{100 * o.ideal:.1f}"
        )  # fmt: skip
        table.add_row(o.label, *cells, o.status, style=None if o.status == "ok" else "bold red")
    console.print(table)
    failed = [o.label for o in outcomes if o.status != "ok"] + (["decode"] if decode_failures else [])
    if failed:
        console.print(f"FAILED: {', '.join(failed)}", style="bold red")
        return 1
    console.print("all patterns match the reference")
    return 0
