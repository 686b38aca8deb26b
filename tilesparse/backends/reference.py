"""The oracle: masked dense attention in float32 (or float64), any device, autograd.

It materializes the (B, H, T, T) scores: memory grows with T^2, so it is for checking and for
small sequences. :func:`masked_attention` is the math; the backend feeds it the mask the IR's
index tensors stand for.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..ir import AttentionInputs, DotScore, PreparedGroup, to_dense
from ..ir.prepare import head_index
from .base import Backend, register, select_heads
from .kept_product import kept_scores, kept_weighted_sum

__all__ = ["ReferenceBackend", "feature_mask", "kv_for_heads", "masked_attention"]


def feature_mask(support: Tensor, head_dim: int, dtype: torch.dtype) -> Tensor:
    """(..., k) feature ids -> (..., D) 0/1 mask."""
    m = torch.zeros((*support.shape[:-1], head_dim), dtype=dtype, device=support.device)
    return m.scatter_(-1, support.long(), 1.0)


def masked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None,
    *,
    scale: float,
    q_features: Tensor | None = None,
    k_features: Tensor | None = None,
    precision: torch.dtype = torch.float32,
) -> Tensor:
    """softmax(q k^T * scale, masked) v in ``precision``; fully masked rows give zeros.

    q (B, H, T, D); k, v (B, Hkv, T, D), expanded here for grouped-query attention; mask
    (B, H, T, T) bool (True keeps) or None; ``q_features``/``k_features`` (B, H, T, D) 0/1 masks
    that zero the features a token does not keep (TopKFeatures). Returns ``precision``.
    """
    group = q.shape[1] // k.shape[1]
    qf, kf, vf = q.to(precision), k.to(precision), v.to(precision)
    if group > 1:
        kf, vf = kf.repeat_interleave(group, dim=1), vf.repeat_interleave(group, dim=1)
    if q_features is not None:
        # where, not a product: an inf in an unkept feature stays out (0 * inf is NaN)
        qf = torch.where(q_features.to(torch.bool), qf, 0.0)
        kf = torch.where(k_features.to(torch.bool), kf, 0.0)
    if mask is not None:
        # an inf or NaN at a key reaches only the rows that keep it (0 * inf is NaN in plain
        # products): kept_product.py
        mask = mask.expand(*qf.shape[:-1], kf.shape[-2])
        s = kept_scores(qf, kf, mask) * scale
        s = s.masked_fill(~mask, float("-inf"))
    else:
        s = torch.matmul(qf, kf.transpose(-1, -2)) * scale
    # the max only stabilizes exp; a row with no kept key has max -inf and takes 0 instead
    m = s.amax(dim=-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    denom = p.sum(dim=-1, keepdim=True)
    pv = torch.matmul(p, vf) if mask is None else kept_weighted_sum(p, vf, mask)
    return pv / torch.where(denom == 0, torch.ones_like(denom), denom)


class ReferenceBackend(Backend):
    """Masked dense attention over the IR's element mask; O(T^2) memory."""

    NAME = "reference"

    def blocks(self, inputs: AttentionInputs) -> tuple[int, int]:
        return 64, 64

    def attend(self, g: PreparedGroup, inputs: AttentionInputs) -> Tensor:
        q = select_heads(inputs.q, g.heads, inputs.heads)
        k, v = kv_for_heads(inputs, g.heads)
        qf = kf = None
        if not isinstance(g.group.score, DotScore):
            qf = feature_mask(g.q_support, inputs.head_dim, torch.float32)
            kf = feature_mask(g.k_support, inputs.head_dim, torch.float32)
        out = masked_attention(q, k, v, to_dense(g), scale=inputs.scale, q_features=qf, k_features=kf)
        return out.to(inputs.dtype)


def kv_for_heads(inputs: AttentionInputs, heads: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    """k and v with one head per query head in ``heads`` (a view when nothing is selected, or
    a run of heads without grouped-query attention)."""
    if heads == tuple(range(inputs.heads)):
        return inputs.k, inputs.v
    kv = tuple(h // inputs.group for h in heads)
    if inputs.group == 1:  # one kv head per query head: a view for a run of heads
        return select_heads(inputs.k, kv, inputs.kv_heads), select_heads(inputs.v, kv, inputs.kv_heads)
    index = head_index(kv, inputs.device)
    return inputs.k.index_select(1, index), inputs.v.index_select(1, index)


register(ReferenceBackend())
