"""The built-in ``topk_abs`` criterion in one Triton launch: every head of q and k.

The criterion (:func:`tilesparse.patterns.criteria.topk_abs`) keeps a token's ``k`` features of
largest |x|, ties to the lowest feature id, and returns their ids in increasing order. As torch
ops that is, per side, an absolute value, a stable descending sort over the head dim, a slice
and a second sort of the ids (and, with grouped-query attention, a copy of k per query head):
about fourteen launches a call, two of them multi-pass sorts. Here a program takes a block of
tokens of one head of q or k and does it in registers, in 32-bit integers:

- each feature's magnitude is its bits with the sign cleared (for IEEE floats of one dtype the
  integer order of those bits is the order of |x|; every NaN made one above infinity, as a
  sort puts NaN above infinity and treats NaNs as equal); integer work only, so no subnormal
  is flushed;
- the ``k``-th largest magnitude m is found by bisection over [0, inf + 2) (15 steps for
  16-bit inputs, 31 for fp32: each counts the features that reach the midpoint), not by a
  sort;
- the features above m are kept, and of those equal to m the lowest ids, as many as fill k
  (a running count of the ties); a running count over the kept features places each id, in
  increasing order.

A kv head's keys are selected once and the support written to each query head of its group
(the criterion selects on the copy of k per query head: the same supports). The result is the
criterion's, exactly (tests/backends/triton/test_topk.py holds it to the torch ops).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .launch import Sites, cdiv

__all__ = ["MAX_HEAD_DIM", "topk_abs_into", "topk_abs_reasons", "topk_constexprs"]

MAX_HEAD_DIM = 256
# features a program selects from: BLOCK_T tokens of BLOCK_D, at least 16 tokens; 4 warps. On
# the GPU (topk_kernel_run141_h200.json, B=1 H=32 Hkv=8, 16k and 32k, k = 8 and 32) 16 tokens
# were the fastest or within 4% of it at D=64 and 128, where 32 tokens at D=64 took up to 37%
# more with k=32; 8 warps were slower everywhere
_TILE = 1024
_WARPS = 4
# a dtype's magnitude bits (the sign cleared) and its infinity's: above it, every NaN
_BITS = {
    torch.float32: (32, 0x7FFFFFFF, 0x7F800000),
    torch.float16: (16, 0x7FFF, 0x7C00),
    torch.bfloat16: (16, 0x7FFF, 0x7F80),
}


@triton.jit(do_not_specialize=["q_len", "k_len", "n_heads", "kv_heads", "k"])
def _topk_abs(Q, K, Q_OUT, K_OUT,
              stride_qb, stride_qh, stride_qt, stride_qd,
              stride_kb, stride_kh, stride_kt, stride_kd,
              q_len, k_len, n_heads, kv_heads, k,
              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr,
              WIDTH: tl.constexpr, MAG_MASK: tl.constexpr, INF_BITS: tl.constexpr, STEPS: tl.constexpr):
    """The supports of BLOCK_T tokens of one head into the (B, H, T, k) int32 outputs:
    program_id 1 is a batch's n_heads query heads of q, then its kv_heads heads of k, each
    of whose supports goes to the query heads of its group."""
    pid_t = tl.program_id(0)
    b = tl.program_id(1) // (n_heads + kv_heads)
    h = tl.program_id(1) % (n_heads + kv_heads)
    if h < n_heads:
        _select_into(Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh, stride_qt, stride_qd, q_len,
                     Q_OUT, b * n_heads + h, 1, pid_t, k,
                     HEAD_DIM, BLOCK_D, BLOCK_T, WIDTH, MAG_MASK, INF_BITS, STEPS)  # fmt: skip
    else:
        group = n_heads // kv_heads
        hk = h - n_heads
        _select_into(K + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh, stride_kt, stride_kd, k_len,
                     K_OUT, b * n_heads + hk * group, group, pid_t, k,
                     HEAD_DIM, BLOCK_D, BLOCK_T, WIDTH, MAG_MASK, INF_BITS, STEPS)  # fmt: skip


@triton.jit
def _select_into(base, stride_t, stride_d, seqlen, out, head, copies, pid_t, k,
                 HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_T: tl.constexpr,
                 WIDTH: tl.constexpr, MAG_MASK: tl.constexpr, INF_BITS: tl.constexpr, STEPS: tl.constexpr):
    """One head's block of tokens (at ``base``) selected into output heads head..head+copies-1."""
    if pid_t * BLOCK_T < seqlen:  # the grid covers the longer side
        offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
        offs_d = tl.arange(0, BLOCK_D)
        t_ok = offs_t < seqlen
        d_ok = offs_d < HEAD_DIM
        ptrs = base + offs_t[:, None].to(tl.int64) * stride_t + offs_d[None, :] * stride_d
        x = tl.load(ptrs, mask=t_ok[:, None] & d_ok[None, :], other=0.0)
        if WIDTH == 16:
            bits = x.to(tl.int16, bitcast=True).to(tl.int32)
        else:
            bits = x.to(tl.int32, bitcast=True)
        mag = bits & MAG_MASK  # |x|'s bits, non-negative
        mag = tl.where(mag > INF_BITS, INF_BITS + 1, mag)  # every NaN alike, above infinity
        mag = tl.where(d_ok[None, :], mag, -1)  # padding below every feature
        # the k-th largest magnitude, by bisection: the largest m that k features reach
        lo = tl.zeros([BLOCK_T], dtype=tl.int32)  # every feature reaches 0
        hi = tl.full([BLOCK_T], INF_BITS + 2, dtype=tl.int32)  # none reaches it
        for _ in range(STEPS):
            mid = lo + ((hi - lo) >> 1)  # no overflow near fp32's NaN
            enough = tl.sum((mag >= mid[:, None]).to(tl.int32), 1) >= k
            lo = tl.where(enough, mid, lo)
            hi = tl.where(enough, hi, mid)
        above = mag > lo[:, None]  # fewer than k
        tie = mag == lo[:, None]  # enough to fill the rest: the lowest ids do
        room = k - tl.sum(above.to(tl.int32), 1)
        kept = above | (tie & (tl.cumsum(tie.to(tl.int32), 1) <= room[:, None]))
        at = tl.cumsum(kept.to(tl.int32), 1) - 1
        ids = offs_d[None, :] + tl.zeros_like(at)
        for g in range(copies):
            row = ((head + g).to(tl.int64) * seqlen + offs_t) * k
            tl.store(out + row[:, None] + at, ids, mask=kept & t_ok[:, None])


def topk_abs_reasons(device_type: str, head_dim: int) -> list[str]:
    """Why the kernel should not select a call's supports (empty when it should)."""
    reasons = []
    if device_type != "cuda":
        reasons.append(f"on {device_type!r} the criterion's torch ops select (the kernel is for CUDA)")
    if head_dim > MAX_HEAD_DIM:
        reasons.append(f"head dim {head_dim} > {MAX_HEAD_DIM}")
    return reasons


def topk_constexprs(head_dim: int, dtype: torch.dtype) -> dict:
    """The kernel's compile-time constants for a launch (and for sm90.index_variants)."""
    from .op import _block_d

    block_d = _block_d(head_dim)
    width, mag_mask, inf_bits = _BITS[dtype]
    # bisection steps from [0, inf_bits + 2) down to one magnitude (NaN one above infinity)
    steps = (inf_bits + 1).bit_length()
    return dict(HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_T=max(16, _TILE // block_d), WIDTH=width,
                MAG_MASK=mag_mask, INF_BITS=inf_bits, STEPS=steps)  # fmt: skip


def topk_abs_into(q: Tensor, k: Tensor, n_keep: int, q_support: Tensor, k_support: Tensor) -> None:
    """The ``n_keep`` features of largest |x| of every token of q (B, H, Tq, D) and k (B, Hkv,
    Tk, D) into the contiguous (B, H, Tq, n_keep) / (B, H, Tk, n_keep) int32 buffers, ids in
    increasing order (one launch)."""
    B, H, Tq, D = q.shape
    Tk = k.shape[2]
    if q.dtype not in _BITS or k.dtype != q.dtype:
        raise ValueError(f"q and k must share one of {sorted(map(str, _BITS))}, got {q.dtype} and {k.dtype}")
    if k.dim() != 4 or k.shape[0] != B or k.shape[3] != D or H % k.shape[1]:
        raise ValueError(f"k of shape {tuple(k.shape)} does not fit q of shape {tuple(q.shape)}")
    if not 1 <= n_keep <= D or D > MAX_HEAD_DIM:
        raise ValueError(f"n_keep must lie in [1, D={D}] and D in [1, {MAX_HEAD_DIM}], got n_keep={n_keep}")
    for name, t, T in (("q_support", q_support, Tq), ("k_support", k_support, Tk)):
        if t.shape != (B, H, T, n_keep) or t.dtype != torch.int32 or not t.is_contiguous() or t.device != q.device:
            raise ValueError(
                f"{name} must be a contiguous ({B}, {H}, {T}, {n_keep}) int32 tensor on {q.device}, "
                f"got {tuple(t.shape)} {t.dtype} on {t.device}"
            )
    if max(Tq, Tk) == 0 or B * H == 0:
        return
    site = _SITES.get((B, H, k.shape[1], Tq, Tk, D, q.dtype), lambda: _grid_and_constants(q, k))
    site((q, k, q_support, k_support), (), (*q.stride(), *k.stride(), Tq, Tk, H, k.shape[1], n_keep))


def _grid_and_constants(q: Tensor, k: Tensor) -> tuple[tuple[int, int], dict]:
    B, H, Tq, D = q.shape
    constants = topk_constexprs(D, q.dtype)
    return (cdiv(max(Tq, k.shape[2]), constants["BLOCK_T"]), B * (H + k.shape[1])), dict(constants, num_warps=_WARPS)


_SITES = Sites(_topk_abs)  # the launch's sites by sizes and dtype
