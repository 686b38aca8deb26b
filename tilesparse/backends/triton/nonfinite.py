"""The device-side flag that sends a launch to the kernels' sanitizing loops.

A masked tile multiplies probabilities that are exactly 0 by every k and v (and q, dO) row
it visits, and 0 * inf is NaN: without care an inf or NaN at a key reaches rows that do not
keep it. The kernels contain it in separate loops, taken only when this flag is set, so inputs
without a non-finite value run the unchanged loops.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .launch import lean

__all__ = ["launch_pair", "nonfinite_flag"]


def nonfinite_flag(*tensors: Tensor) -> Tensor:
    """An int32 (1,) tensor on the tensors' device: 1 when some element of them is inf or NaN.

    One fp32 sum per tensor and no host read (a launch argument, graph-capturable): a sum
    holding an inf or NaN is not finite, so the flag is never 0 when it should be 1; a sum of
    finite values that overflows fp32 sets it too, which only costs the slower loops.
    """
    total = tensors[0].sum(dtype=torch.float32)
    for t in tensors[1:]:
        total = total + t.sum(dtype=torch.float32)
    return (~torch.isfinite(total)).to(torch.int32).reshape(1)


def launch_pair(kernel, grid, *args, **kwargs) -> None:
    """Launch ``kernel``'s unchanged variant and its sanitizing one (``SANITIZE=True``) with the
    same arguments: each reads the flag and writes nothing unless it is its case (the
    sanitizing variant exits at once on finite inputs; the unchanged dK/dV kernel reads the
    flag only before its stores, where it leaves its loops' code as it was), so exactly one
    writes the outputs and the unchanged tile loops stay as they were compiled."""
    launch = lean(kernel)[grid]
    launch(*args, **kwargs)
    launch(*args, SANITIZE=True, **kwargs)
