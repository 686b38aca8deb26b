"""What the subcommands share about their inputs: the shape options and the random q, k, v."""

from __future__ import annotations

import argparse

import torch
from torch import Tensor

__all__ = ["DTYPES", "add_input_arguments", "criteria_generator", "positive_int", "random_inputs"]

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}")
    return value


def add_input_arguments(
    parser: argparse.ArgumentParser, *, seqlen: int, heads: int, head_dim: int, shape_only: bool = False
) -> None:
    """Add --batch, --heads, --seqlen, --head-dim, --dtype, --device, --seed with these defaults;
    ``shape_only``: --heads, --seqlen, --head-dim, --seed (batch 1, float32 on the CPU)."""
    group = parser.add_argument_group("inputs (random q, k, v)")
    sizes = (
        ("--batch", 1, "B", "batch size"),
        ("--heads", heads, "H", "query heads"),
        ("--seqlen", seqlen, "T", "sequence length"),
        ("--head-dim", head_dim, "D", "head dim, a multiple of 8"),
    )
    for flag, default, metavar, what in sizes[shape_only:]:
        group.add_argument(
            flag, type=positive_int, default=default, metavar=metavar, help=f"{what} (default: %(default)s)"
        )
    if not shape_only:
        group.add_argument("--dtype", choices=sorted(DTYPES), default="float32", help="input dtype (default: %(default)s)")
        group.add_argument("--device", default="cpu", help="torch device (default: %(default)s)")
    group.add_argument("--seed", type=int, default=0, help="seeds the inputs and the criteria (default: %(default)s)")


def random_inputs(args: argparse.Namespace, *, requires_grad: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Standard normal q, k, v of shape (batch, heads, seqlen, head_dim), seeded by ``args.seed``."""
    gen = torch.Generator(device=args.device).manual_seed(args.seed)
    shape = (args.batch, args.heads, args.seqlen, args.head_dim)
    q, k, v = (
        torch.randn(shape, generator=gen, device=args.device).to(DTYPES[args.dtype]).requires_grad_(requires_grad)
        for _ in range(3)
    )
    return q, k, v


def criteria_generator(args: argparse.Namespace) -> torch.Generator:
    """The generator random criteria draw from: seeded, so a run repeats exactly."""
    return torch.Generator(device=args.device).manual_seed(args.seed + 1)
