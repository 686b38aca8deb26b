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

A group of every query head in order (``in_order``: the usual GQA call) knows its sources
without the head map: kv head j's are rows j * group .. j * group + group - 1, a constant
count the kernel unrolls, so all their loads are in flight at once. Walking the head map
instead issues one load per matching head after a scalar read and a branch for each of the
Hg heads: at B=1, H=32, Hkv=8, D=128, T=4,096 (151 MB) that took 67 us (2.2 TB/s) and the
unrolled sum 36 us (4.2 TB/s), bit for bit equal (benchmarks/results/ab_gqa_sum_run184_h200.json).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .launch import Sites, cdiv

__all__ = ["sum_into_kv_heads"]

_BLOCK = 2048  # elements a program sums: 16 per thread of 4 warps
_WARPS = 4


@triton.jit
def _sum_tile(SRC, HEAD_MAP, b, j, offs, ok, n_elems, n_query, group, IN_ORDER: tl.constexpr, GROUP: tl.constexpr):
    """The sum of one tile of kv head j's query heads' rows in SRC (B, n_query, n_elems)."""
    acc = tl.zeros(offs.shape, dtype=tl.float32)
    if IN_ORDER:
        first = (b * n_query + j * GROUP).to(tl.int64) * n_elems
        for r in tl.static_range(GROUP):
            acc += tl.load(SRC + first + r * n_elems + offs, mask=ok, other=0.0)
    else:
        for i in range(0, n_query):
            if tl.load(HEAD_MAP + i) // group == j:
                row = (b * n_query + i).to(tl.int64) * n_elems
                acc += tl.load(SRC + row + offs, mask=ok, other=0.0)
    return acc


@triton.jit(do_not_specialize=["n_elems", "n_query", "group_k", "group_v", "heads_k", "heads_v", "heads_max"])
def _sum_into_kv_heads(DK, DV, HEAD_MAP, OUT_K, OUT_V,
                       n_elems, n_query, group_k, group_v, heads_k, heads_v, heads_max,
                       BLOCK: tl.constexpr, IN_ORDER: tl.constexpr, GROUP_K: tl.constexpr, GROUP_V: tl.constexpr):
    """OUT_K[b, j] = sum of DK[b, i] over the i with HEAD_MAP[i] // group_k == j (and the same
    for V): DK, DV contiguous (B, n_query, n_elems) fp32, OUT_K (B, heads_k, n_elems) and
    OUT_V (B, heads_v, n_elems) contiguous. With IN_ORDER the head map is 0 .. n_query - 1
    and GROUP_K, GROUP_V equal group_k, group_v (unrolled); otherwise they are unused (1)."""
    pid_bh = tl.program_id(1)
    b = pid_bh // heads_max
    j = pid_bh % heads_max
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < n_elems
    if tl.program_id(2) == 0:
        if j < heads_k:
            acc = _sum_tile(DK, HEAD_MAP, b, j, offs, ok, n_elems, n_query, group_k, IN_ORDER, GROUP_K)
            tl.store(OUT_K + (b * heads_k + j).to(tl.int64) * n_elems + offs, acc.to(OUT_K.dtype.element_ty), mask=ok)
    else:
        if j < heads_v:
            acc = _sum_tile(DV, HEAD_MAP, b, j, offs, ok, n_elems, n_query, group_v, IN_ORDER, GROUP_V)
            tl.store(OUT_V + (b * heads_v + j).to(tl.int64) * n_elems + offs, acc.to(OUT_V.dtype.element_ty), mask=ok)


def sum_into_kv_heads(
    dk: Tensor, dv: Tensor, head_map: Tensor, n_heads: int, k: Tensor, v: Tensor, *, in_order: bool = False
) -> tuple[Tensor, Tensor]:
    """The per-query-head fp32 gradients ``dk``, ``dv`` (contiguous (B, Hg, Tk, D), row i of
    query head ``head_map[i]`` of the call's ``n_heads``) summed into new contiguous tensors of
    ``k``'s and ``v``'s shapes and dtypes (one launch). ``in_order``: the caller knows that
    ``head_map`` is 0 .. n_heads - 1 (the head map itself is not read then)."""
    B, Hg, Tk, D = dk.shape
    H_k, H_v = k.shape[1], v.shape[1]
    if dv.shape != dk.shape or k.shape[2:] != (Tk, D) or v.shape[2:] != (Tk, D) or head_map.shape != (Hg,):
        raise ValueError(
            f"gradients {tuple(dk.shape)} and {tuple(dv.shape)} with {tuple(head_map.shape)} head ids do not fit "
            f"k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    if n_heads % H_k or n_heads % H_v:
        raise ValueError(f"{n_heads} query heads do not divide into {H_k} k heads and {H_v} v heads")
    if in_order and Hg != n_heads:
        raise ValueError(f"in_order needs a gradient per query head: {Hg} of {n_heads}")
    for t in (dk, dv):
        if t.dtype != torch.float32 or not t.is_contiguous():
            raise ValueError(f"per-query-head gradients must be contiguous float32, got {t.dtype}")
    out_k = torch.empty((B, H_k, Tk, D), dtype=k.dtype, device=k.device)
    out_v = torch.empty((B, H_v, Tk, D), dtype=v.dtype, device=v.device)
    heads_max = max(H_k, H_v)
    site = _SITES.get((B, Hg, Tk, D, H_k, H_v, n_heads, in_order), lambda: (
        (cdiv(Tk * D, _BLOCK), B * heads_max, 2),
        dict(BLOCK=_BLOCK, IN_ORDER=in_order, GROUP_K=n_heads // H_k if in_order else 1,
             GROUP_V=n_heads // H_v if in_order else 1, num_warps=_WARPS),
    ))  # fmt: skip
    site((dk, dv, head_map, out_k, out_v), (), (Tk * D, Hg, n_heads // H_k, n_heads // H_v, H_k, H_v, heads_max))
    return out_k, out_v


_SITES = Sites(_sum_into_kv_heads)  # the launch's sites by sizes
