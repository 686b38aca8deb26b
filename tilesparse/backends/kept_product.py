"""Products whose left factor is exactly 0 off a mask, without 0 * inf.

A masked attention multiplies probabilities (or score gradients) that are exactly 0 for the
elements a row does not keep by every row of v (or k, q, dO) it meets, and 0 * inf is NaN: an
inf or NaN at one key would reach rows that do not keep it. Here a non-finite row of the right
factor reaches only the rows of the product that keep it (they become NaN), so a row's output
and gradients depend only on the keys its mask keeps. With finite inputs every function equals
the plain product. The reference and the tile executor use them; the kernels do the same in
their tiles.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["kept_product", "kept_scores", "kept_weighted_sum"]


def kept_product(a: Tensor, b: Tensor, keep: Tensor | None) -> Tensor:
    """a @ b for a (..., M, N), exactly 0 off ``keep`` (..., M, N) (None: everything kept), and
    b (..., N, D): a non-finite row of b reaches only the rows of the product that keep it."""
    if keep is None:
        return a @ b
    finite = torch.isfinite(b)
    out = a @ torch.where(finite, b, 0.0)
    reached = (keep & ~finite.all(dim=-1).unsqueeze(-2)).any(dim=-1, keepdim=True)
    return torch.where(reached, float("nan"), out)


class _Scores(torch.autograd.Function):
    """q @ k^T whose backward keeps each key's and query's gradient to the elements of ``keep``."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, keep: Tensor) -> Tensor:
        ctx.save_for_backward(q, k, keep)
        return q @ k.transpose(-1, -2)

    @staticmethod
    def backward(ctx, g: Tensor):
        q, k, keep = ctx.saved_tensors
        g = torch.where(keep, g, 0.0)
        return kept_product(g, k, keep), kept_product(g.transpose(-1, -2), q, keep.transpose(-1, -2)), None


class _Weighted(torch.autograd.Function):
    """p @ v for p exactly 0 off ``keep``, forward and backward without 0 * inf."""

    @staticmethod
    def forward(ctx, p: Tensor, v: Tensor, keep: Tensor) -> Tensor:
        ctx.save_for_backward(p, v, keep)
        return kept_product(p, v, keep)

    @staticmethod
    def backward(ctx, g: Tensor):
        p, v, keep = ctx.saved_tensors
        dp = torch.where(keep, g @ v.transpose(-1, -2), 0.0)
        return dp, kept_product(p.transpose(-1, -2), g, keep.transpose(-1, -2)), None


def kept_scores(q: Tensor, k: Tensor, keep: Tensor) -> Tensor:
    """Differentiable q @ k^T (..., M, N) to be masked by ``keep``: the gradients of q and k
    take only the kept elements (a masked score's zero gradient never meets an inf)."""
    return _Scores.apply(q, k, keep)


def kept_weighted_sum(p: Tensor, v: Tensor, keep: Tensor) -> Tensor:
    """Differentiable p @ v for probabilities p exactly 0 off ``keep``: :func:`kept_product`
    forward, and the same containment for the gradients of p and v."""
    return _Weighted.apply(p, v, keep)
