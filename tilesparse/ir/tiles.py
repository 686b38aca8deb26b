"""Tiles a kernel visits: the block arithmetic every backend applies to the row ranges.

The Triton kernels do this same arithmetic in-kernel; the tile executor and the inspection
tools call :func:`tile_intervals`.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["tile_intervals", "visited_tiles"]


def tile_intervals(ranges: Tensor, nseg: Tensor, block_n: int) -> Tensor:
    """(..., S, 4) row ranges -> (..., S, 4) tile intervals ``(lo, f0, f1, hi)`` for tiles
    ``block_n`` rows wide: visit ``[lo, hi)``, of which ``[f0, f1)`` need no mask.

    A tile an earlier segment of the same block visited is not visited again (``lo`` starts at
    the running maximum of the earlier segments' ``hi``); unused segment slots are empty.
    """
    r = ranges.to(torch.int64)
    lo = r[..., 0] // block_n
    hi = -(-r[..., 3] // block_n)
    used = torch.arange(r.shape[-2], device=r.device) < nseg.unsqueeze(-1).to(torch.int64)
    hi = torch.where(used, hi, 0)
    # the running max of earlier segments' hi, seen by segment s
    prev = torch.nn.functional.pad(hi[..., :-1], (1, 0)).cummax(dim=-1).values
    lo = torch.maximum(lo, prev)
    hi = torch.maximum(hi, lo)
    f0 = torch.minimum(torch.maximum(-(-r[..., 1] // block_n), lo), hi)
    f1 = torch.minimum(torch.maximum(r[..., 2] // block_n, f0), hi)
    out = torch.stack([lo, f0, f1, hi], dim=-1)
    return torch.where(used.unsqueeze(-1), out, 0)


def visited_tiles(ranges: Tensor, nseg: Tensor, block_n: int, n_tiles: int) -> tuple[Tensor, Tensor]:
    """(visited, unmasked): (..., n_tiles) bool per block: the tiles a kernel with tiles
    ``block_n`` wide visits, and those it runs without the mask."""
    iv = tile_intervals(ranges, nseg, block_n)
    idx = torch.arange(n_tiles, device=ranges.device)
    inside = lambda a, b: (idx >= a.unsqueeze(-1)) & (idx < b.unsqueeze(-1))  # noqa: E731
    visited = inside(iv[..., 0], iv[..., 3]).any(dim=-2)
    unmasked = inside(iv[..., 1], iv[..., 2]).any(dim=-2)
    return visited, unmasked
