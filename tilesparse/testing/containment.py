"""Checking that a non-finite value stays where the mask lets it go."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["assert_query_contained"]


def assert_query_contained(
    out: Tensor,
    grads: Sequence[Tensor],
    want: Tensor,
    want_grads: Sequence[Tensor],
    hit: Tensor,
    mask: Tensor,
    *,
    nonfinite_grads: Sequence[int] = (1, 2),
    atol: float = 2e-5,
) -> None:
    """A call whose queries at rows ``hit`` (B, H, T bool) held an inf or NaN (``out``, and
    ``grads`` of q, k, v) against the same call on clean queries (``want``, ``want_grads``):
    every other row's output and dq, and the dk and dv of every key no hit row keeps under
    ``mask`` (B, H, T, T), equal the clean call's; the hit rows' outputs are not finite, and so
    is some entry of each hit key's gradient among ``nonfinite_grads`` (1: dk, 2: dv)."""
    hit_keys = (mask & hit[..., None]).any(-2)
    torch.testing.assert_close(out[~hit], want[~hit], rtol=0, atol=atol)
    torch.testing.assert_close(grads[0][~hit], want_grads[0][~hit], rtol=0, atol=atol)
    for got, ref in zip(grads[1:], want_grads[1:], strict=True):
        torch.testing.assert_close(got[~hit_keys], ref[~hit_keys], rtol=0, atol=atol)
    assert not torch.isfinite(out[hit]).any(), "a row holding a non-finite query gave a finite output"
    for i in nonfinite_grads:
        assert not torch.isfinite(grads[i][hit_keys]).all(-1).any(), f"grads[{i}] finite at a key a hit row keeps"
