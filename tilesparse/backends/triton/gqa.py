"""The backward's dK and dV summed into the kv heads, and cast, in one launch.

Each query head sorts its keys by its own buckets, so a dK/dV program's key tile holds other
keys for each query head of a kv group: the kernel writes fp32 gradients per query head, and
they are summed into the kv heads afterwards. As torch ops that is a sum and a cast per
tensor (four launches, and an fp32 (B, Hkv, Tk, D) tensor written and read again between
them), or zeros, an ``index_add_`` and a cast where the group holds only some query heads.
Here one launch does both tensors, for any group: a program takes a tile of one kv head's
(Tk, D) elements on one side (program_id 2: 0 for dK, 1 for dV), adds the tiles of the query
heads the group's head map sends to that kv head, in head order, and stores the sum cast to
the input's dtype (zeros for a kv head no query head of the group reaches).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .launch import cdiv, lean

__all__ = ["sum_into_kv_heads"]

_BLOCK = 1024  # elements a program sums: 8 per thread of 4 warps
_WARPS = 4


@triton.jit(do_not_specialize=["n_elems", "n_query", "group_k", "group_v", "heads_k", "heads_v", "heads_max"])
def _sum_into_kv_heads(DK, DV, HEAD_MAP, OUT_K, OUT_V,
                       n_elems, n_query, group_k, group_v, heads_k, heads_v, heads_max,
                       BLOCK: tl.constexpr):
    """OUT_K[b, j] = sum of DK[b, i] over the i with HEAD_MAP[i] // group_k == j (and the same
    for V): DK, DV contiguous (B, n_query, n_elems) fp32, OUT_K (B, heads_k, n_elems) and
    OUT_V (B, heads_v, n_elems) contiguous."""
    pid_bh = tl.program_id(1)
    b = pid_bh // heads_max
    j = pid_bh % heads_max
    if tl.program_id(2) == 0:
        src = DK
        dst = OUT_K
        group = group_k
        heads = heads_k
    else:
        src = DV
        dst = OUT_V
        group = group_v
        heads = heads_v
    if j < heads:
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        ok = offs < n_elems
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for i in range(0, n_query):
            if tl.load(HEAD_MAP + i) // group == j:
                row = (b * n_query + i).to(tl.int64) * n_elems
                acc += tl.load(src + row + offs, mask=ok, other=0.0)
        out = (b * heads + j).to(tl.int64) * n_elems
        tl.store(dst + out + offs, acc.to(dst.dtype.element_ty), mask=ok)


def sum_into_kv_heads(
    dk: Tensor, dv: Tensor, head_map: Tensor, n_heads: int, k: Tensor, v: Tensor
) -> tuple[Tensor, Tensor]:
    """The per-query-head fp32 gradients ``dk``, ``dv`` (contiguous (B, Hg, Tk, D), row i of
    query head ``head_map[i]`` of the call's ``n_heads``) summed into new contiguous tensors of
    ``k``'s and ``v``'s shapes and dtypes (one launch)."""
    B, Hg, Tk, D = dk.shape
    H_k, H_v = k.shape[1], v.shape[1]
    if dv.shape != dk.shape or k.shape[2:] != (Tk, D) or v.shape[2:] != (Tk, D) or head_map.shape != (Hg,):
        raise ValueError(
            f"gradients {tuple(dk.shape)} and {tuple(dv.shape)} with {tuple(head_map.shape)} head ids do not fit "
            f"k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    if n_heads % H_k or n_heads % H_v:
        raise ValueError(f"{n_heads} query heads do not divide into {H_k} k heads and {H_v} v heads")
    for t in (dk, dv):
        if t.dtype != torch.float32 or not t.is_contiguous():
            raise ValueError(f"per-query-head gradients must be contiguous float32, got {t.dtype}")
    out_k = torch.empty((B, H_k, Tk, D), dtype=k.dtype, device=k.device)
    out_v = torch.empty((B, H_v, Tk, D), dtype=v.dtype, device=v.device)
    heads_max = max(H_k, H_v)
    lean(_sum_into_kv_heads)[(cdiv(Tk * D, _BLOCK), B * heads_max, 2)](
        dk, dv, head_map, out_k, out_v, Tk * D, Hg, n_heads // H_k, n_heads // H_v, H_k, H_v, heads_max,
        BLOCK=_BLOCK, num_warps=_WARPS,
    )  # fmt: skip
    return out_k, out_v
