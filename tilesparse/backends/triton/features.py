"""TopKFeatures' q~ and k~ (the unkept features zeroed) in one launch per side, and their
gradients in one launch per side.

A feature group attends over q~ and k~: each token of each of the group's query heads keeps
the features its support lists and reads zeros elsewhere. As torch ops that is a 0/1 mask per
side (a zeroed tensor and a scatter), a tensor of ones for the heads outside the group (and
an ``index_copy_`` of the mask into it), k repeated per query head under grouped-query
attention, and a product: seven launches a side, four of them full-size writes. The product
also let an inf in an unkept feature through as NaN (0 * inf), where the reference keeps it out.

Here a program takes a tile of one output head's rows, reads the input rows of the head it
comes from (the kv head ``h // group`` for k~) and keeps each element whose feature the
row's support lists (``tl.where``: an inf or NaN in an unkept feature stays out, as in
the reference); heads outside the group (``slot`` -1) pass as they are. The gradient is the
same selection of the incoming gradient, summed over the query heads of each kv head for k
(fp32, in head order, one cast).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from ...ir.prepare import head_slots
from ..first_order import first_order_only
from .launch import lean

__all__ = ["constexprs", "keep_features"]

_TILE = 2048  # elements a program holds (rows x padded head dim)
_WARPS = 4


@triton.jit(do_not_specialize=["seqlen", "n_src", "x_div", "n_keep", "heads_out"])
def _keep_features(SRC, SUPPORT, SLOT, DST,
                   stride_xb, stride_xh, stride_xt, stride_sb, stride_sh, stride_st,
                   seqlen, n_src, x_div, n_keep, heads_out,
                   HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr, WORDS: tl.constexpr):
    """DST[b, o, t] (contiguous (B, heads_out, seqlen, HEAD_DIM)) = the sum over r < n_src of SRC[b,
    h // x_div, t] with h = o * n_src + r, each element kept where SUPPORT[b, SLOT[h], t, :n_keep]
    lists its feature (every element where SLOT[h] < 0); in fp32, cast to DST's dtype."""
    pid_bo = tl.program_id(1)
    b = pid_bo // heads_out
    o = pid_bo % heads_out
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    feats = tl.arange(0, BLOCK_D)
    row_ok = rows < seqlen
    ok = row_ok[:, None] & (feats < HEAD_DIM)[None, :]
    acc = tl.zeros((BLOCK_T, BLOCK_D), dtype=tl.float32)
    for r in range(0, n_src):
        h = o * n_src + r
        src = SRC + b.to(tl.int64) * stride_xb + (h // x_div).to(tl.int64) * stride_xh
        x = tl.load(src + rows[:, None].to(tl.int64) * stride_xt + feats[None, :], mask=ok, other=0.0).to(tl.float32)
        slot = tl.load(SLOT + h)
        if slot >= 0:  # the row's kept features as bits (64 a word), then each element's bit
            ids = SUPPORT + b.to(tl.int64) * stride_sb + slot.to(tl.int64) * stride_sh + rows.to(tl.int64) * stride_st
            w0 = tl.zeros((BLOCK_T,), dtype=tl.int64)
            w1 = tl.zeros((BLOCK_T,), dtype=tl.int64)
            w2 = tl.zeros((BLOCK_T,), dtype=tl.int64)
            w3 = tl.zeros((BLOCK_T,), dtype=tl.int64)
            for j in range(0, n_keep):
                fid = tl.load(ids + j, mask=row_ok, other=-1)
                bit = tl.where(fid >= 0, tl.full((BLOCK_T,), 1, tl.int64) << (fid & 63).to(tl.int64), 0)
                word = fid >> 6
                w0 |= tl.where(word == 0, bit, 0)
                if WORDS > 1:
                    w1 |= tl.where(word == 1, bit, 0)
                if WORDS > 2:
                    w2 |= tl.where(word == 2, bit, 0)
                    w3 |= tl.where(word == 3, bit, 0)
            word_of = (feats >> 6)[None, :]
            bits = w0[:, None] + tl.zeros((BLOCK_T, BLOCK_D), dtype=tl.int64)
            if WORDS > 1:
                bits = tl.where(word_of == 1, w1[:, None], bits)
            if WORDS > 2:
                bits = tl.where(word_of == 2, w2[:, None], bits)
                bits = tl.where(word_of == 3, w3[:, None], bits)
            keep = ((bits >> (feats & 63).to(tl.int64)[None, :]) & 1) != 0
            x = tl.where(keep, x, 0.0)
        acc += x
    out = DST + pid_bo.to(tl.int64) * seqlen * HEAD_DIM
    tl.store(out + rows[:, None].to(tl.int64) * HEAD_DIM + feats[None, :], acc.to(DST.dtype.element_ty), mask=ok)


def constexprs(head_dim: int, seqlen: int | None = None) -> dict:
    """The kernel's compile-time constants at ``head_dim`` for ``seqlen`` rows (None: many)."""
    block_d = triton.next_power_of_2(head_dim)
    block_t = max(1, _TILE // block_d)
    if seqlen is not None:
        block_t = min(block_t, triton.next_power_of_2(seqlen))
    return dict(HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_T=block_t, WORDS=triton.cdiv(block_d, 64))


def _launch(x: Tensor, support: Tensor, slots: Tensor, heads_out: int, n_src: int, x_div: int, dtype) -> Tensor:
    B, _, T, D = x.shape
    out = torch.empty((B, heads_out, T, D), dtype=dtype, device=x.device)
    if B * heads_out * T == 0:
        return out
    const = constexprs(D, T)
    lean(_keep_features)[(triton.cdiv(T, const["BLOCK_T"]), B * heads_out)](
        x, support, slots, out, x.stride(0), x.stride(1), x.stride(2), *support.stride()[:3],
        T, n_src, x_div, support.shape[-1], heads_out,
        **const, num_warps=_WARPS,
    )  # fmt: skip
    return out


def keep_features(x: Tensor, support: Tensor, heads: tuple[int, ...], n_heads: int) -> Tensor:
    """x (B, Hx, T, D) with unit stride along D, as (B, n_heads, T, D): query head h reads x's
    head ``h // (n_heads // Hx)``; for the group's query heads ``heads`` (distinct, any order)
    the features outside their row of ``support`` ((B, len(heads), T, k) int32 feature ids, in
    ``heads``' order) are zeroed, the other heads pass as they are. Differentiable w.r.t. x
    (first order): the gradient keeps the same features and sums each kv head's query heads."""
    B, Hx, T, D = x.shape
    if x.stride(-1) != 1 or Hx == 0 or n_heads % Hx:
        raise ValueError(f"x {tuple(x.shape)} (stride {x.stride()}) does not fit {n_heads} query heads: "
                         "x needs unit stride along D and a head count dividing them")  # fmt: skip
    if len(set(heads)) != len(heads) or not all(0 <= h < n_heads for h in heads):
        raise ValueError(f"heads must be distinct query heads in [0, {n_heads}), got {heads}")
    if support.dim() != 4 or support.shape[:3] != (B, len(heads), T) or support.dtype != torch.int32:
        raise ValueError(f"support must be ({B}, {len(heads)}, {T}, k) int32 feature ids (one row of heads a "
                         f"head), got {tuple(support.shape)} {support.dtype}")  # fmt: skip
    if support.stride(-1) != 1:
        support = support.contiguous()
    slots = head_slots(heads, n_heads, x.device)  # a cached device constant: no upload per call
    return _KeptFeatures.apply(x, support, slots, n_heads)


class _KeptFeatures(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, support: Tensor, slots: Tensor, n_heads: int) -> Tensor:
        ctx.save_for_backward(support, slots)
        ctx.group, ctx.dtype = n_heads // x.shape[1], x.dtype
        return _launch(x, support, slots, n_heads, 1, ctx.group, x.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor):
        support, slots = ctx.saved_tensors
        if grad.stride(-1) != 1:
            grad = grad.contiguous()
        H = grad.shape[1]
        dx = _launch(grad, support, slots, H // ctx.group, ctx.group, 1, ctx.dtype)
        (dx,) = first_order_only("triton", (dx,), (grad,))
        return dx, None, None, None
