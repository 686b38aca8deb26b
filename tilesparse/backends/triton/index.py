"""The layout and ranges stages fused into Triton kernels: the same index tensors as
:func:`tilesparse.ir.prepare_group`, in five launches instead of ~70 small torch ops.

1. ``_sort_keys`` (one launch, both sides): key = bucket * T + position for a kept row,
   ``big + position`` for a dropped one (int32);
2. ``torch.sort`` of each side's keys (radix sort on CUDA; skipped for the identity layout);
3. ``_build_side`` (one launch per side): per block of the layout, the int32 row order,
   position and bucket of every row, the bucket segments (run starts and ends found from the
   neighbouring keys, numbered with a cumulative sum) and each segment's row range on the
   other side, by vectorized binary searches in the other side's sorted keys.

The torch implementation in ``ir/prepare.py`` is the specification: tests check the two give
identical tensors (tests/backends/triton/test_index.py, CPU interpreter and GPU).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ...ir import KEY_SENTINEL, QUERY_SENTINEL, HeadGroup, Keep, Layout, PreparedGroup, Program, SameBucket
from ...ir.prepare import DROPPED_K_BUCKET, DROPPED_Q_BUCKET, _select, assemble_group
from .op import predicate_flags

__all__ = ["build_group"]


@triton.jit(do_not_specialize=["seqlen", "big"])
def _sort_keys(Q_KEEP, K_KEEP, Q_BKT, K_BKT, Q_KEY, K_KEY, seqlen, big,
               HAS_KEEP: tl.constexpr, HAS_BUCKET: tl.constexpr, BLOCK: tl.constexpr):
    """Sort keys of both sides: bucket * T + position, or big + position when dropped."""
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    side = tl.program_id(2)
    base = bh.to(tl.int64) * seqlen
    rows = pid * BLOCK + tl.arange(0, BLOCK)
    ok = rows < seqlen
    key = rows
    if HAS_BUCKET:
        if side == 0:
            b = tl.load(Q_BKT + base + rows, mask=ok, other=0)
        else:
            b = tl.load(K_BKT + base + rows, mask=ok, other=0)
        key = b.to(tl.int32) * seqlen + rows
    if HAS_KEEP:
        if side == 0:
            keep = tl.load(Q_KEEP + base + rows, mask=ok, other=0)
        else:
            keep = tl.load(K_KEEP + base + rows, mask=ok, other=0)
        key = tl.where(keep != 0, key, big + rows)
    if side == 0:
        tl.store(Q_KEY + base + rows, key, mask=ok)
    else:
        tl.store(K_KEY + base + rows, key, mask=ok)


@triton.jit
def _bound(OTHER, target, seqlen, n_steps, RIGHT: tl.constexpr, IDENTITY: tl.constexpr):
    """Per lane: how many of the other side's sorted keys are < target (<= with RIGHT)."""
    if IDENTITY:
        # the other side's keys are 0..T-1 in order
        if RIGHT:
            return tl.minimum(tl.maximum(target + 1, 0), seqlen)
        return tl.minimum(tl.maximum(target, 0), seqlen)
    lo = tl.zeros_like(target)
    hi = tl.zeros_like(target) + seqlen
    for _ in range(n_steps):
        active = lo < hi
        mid = (lo + hi) // 2
        v = tl.load(OTHER + mid, mask=active, other=0)
        if RIGHT:
            go = v <= target
        else:
            go = v < target
        lo = tl.where(active & go, mid + 1, lo)
        hi = tl.where(active & (~go), mid, hi)
    return lo


@triton.jit(do_not_specialize=["seqlen", "n_blocks", "big", "n_steps"])
def _build_side(SKEY, ORDER, OTHER, ORDER_OUT, POS_OUT, BKT_OUT, RANGES, NSEG,
                seqlen, n_blocks, big, n_steps,
                SENTINEL: tl.constexpr, DROPPED_BUCKET: tl.constexpr,
                BLOCK: tl.constexpr, MAX_SEG: tl.constexpr, QUERY_SIDE: tl.constexpr,
                CAUSAL: tl.constexpr, STRICT: tl.constexpr, NOT_SELF: tl.constexpr,
                IDENTITY: tl.constexpr):
    """One block of one side's layout: its layout tensors, segments and row ranges."""
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    base = bh.to(tl.int64) * seqlen
    lane = tl.arange(0, BLOCK)
    rows = pid * BLOCK + lane
    in_t = rows < seqlen
    first = lane == 0
    last = lane == BLOCK - 1
    if IDENTITY:
        key = rows
        order = rows
        prev_key = rows - 1
        next_key = rows + 1
    else:
        key = tl.load(SKEY + base + rows, mask=in_t, other=big)
        order = tl.load(ORDER + base + rows, mask=in_t, other=0).to(tl.int32)
        prev_key = tl.load(SKEY + base + rows - 1, mask=in_t & (~first), other=-1)
        next_key = tl.load(SKEY + base + rows + 1, mask=(rows + 1 < seqlen) & (~last), other=big)
    valid = in_t & (key < big)
    bucket = key // seqlen
    pos = key % seqlen
    tl.store(ORDER_OUT + base + rows, order, mask=in_t)
    tl.store(POS_OUT + base + rows, tl.where(valid, pos, SENTINEL), mask=in_t)
    tl.store(BKT_OUT + base + rows, tl.where(valid, bucket, DROPPED_BUCKET), mask=in_t)

    # segments: runs of one bucket among the block's kept rows (kept rows come first)
    prev_bucket = tl.where(first, -1, prev_key // seqlen)
    starts = valid & (bucket != prev_bucket)
    next_valid = (rows + 1 < seqlen) & (~last) & (next_key < big)
    ends = valid & ((~next_valid) | (next_key // seqlen != bucket))
    seg = tl.cumsum(starts.to(tl.int32), 0) - 1
    nseg = tl.sum(starts.to(tl.int32), 0)
    uniform = (nseg == 1) & (tl.sum(valid.to(tl.int32), 0) == BLOCK)
    tl.store(NSEG + bh.to(tl.int64) * n_blocks + pid, nseg)
    rng = RANGES + (bh.to(tl.int64) * n_blocks + pid) * (MAX_SEG * 4)
    other = OTHER + base
    c = bucket * seqlen
    bucket_start = _bound(other, c, seqlen, n_steps, False, IDENTITY)
    bucket_end = _bound(other, c + seqlen, seqlen, n_steps, False, IDENTITY)
    slot = rng + seg * 4
    if not CAUSAL:
        lo = bucket_start
        hi = bucket_end
        full_hi = hi
        if NOT_SELF:
            full_hi = lo
        full_hi = tl.where(uniform, full_hi, lo)
        tl.store(slot, lo, mask=starts)
        tl.store(slot + 1, lo, mask=starts)
        tl.store(slot + 2, full_hi, mask=starts)
        tl.store(slot + 3, hi, mask=starts)
    elif QUERY_SIDE:
        # keys of the segment's bucket at or before its latest query (before, if STRICT);
        # unmasked: keys at or before its earliest query
        lo = bucket_start
        full_hi = _bound(other, c + pos, seqlen, n_steps, not STRICT, IDENTITY)  # pos = pmin on start lanes
        full_hi = tl.where(uniform, tl.maximum(full_hi, lo), lo)
        tl.store(slot, lo, mask=starts)
        tl.store(slot + 1, lo, mask=starts)
        tl.store(slot + 2, full_hi, mask=starts)
        hi = _bound(other, c + pos, seqlen, n_steps, not STRICT, IDENTITY)  # pos = pmax on end lanes
        tl.store(slot + 3, hi, mask=ends)
    else:
        # queries of the segment's bucket at or after its earliest key (after, if STRICT);
        # unmasked: queries at or after its latest key
        lo = _bound(other, c + pos, seqlen, n_steps, STRICT, IDENTITY)  # pos = kmin on start lanes
        hi = bucket_end
        tl.store(slot, lo, mask=starts)
        tl.store(slot + 1, lo, mask=starts & (~uniform))
        tl.store(slot + 2, tl.where(uniform, hi, lo), mask=starts)
        tl.store(slot + 3, hi, mask=starts)
        full_lo = _bound(other, c + pos, seqlen, n_steps, STRICT, IDENTITY)  # pos = kmax on end lanes
        tl.store(slot + 1, full_lo, mask=ends & uniform)
    # unused segment slots are zero
    unused = (lane >= nseg) & (lane < MAX_SEG)
    zero = tl.zeros_like(lane)
    for j in tl.static_range(4):
        tl.store(rng + lane * 4 + j, zero, mask=unused)


@dataclass(frozen=True)
class _Static:
    """What a group's index build launches with that only the sizes determine (cached)."""

    identity: bool
    keep: bool
    has_bucket: bool
    big: int
    n_steps: int
    flags: dict
    # per side: (blocks, rows per block, segment slots, sentinel, dropped bucket)
    sides: tuple[tuple[int, int, int, int, int], tuple[int, int, int, int, int]]
    # int32 elements of the one buffer every index tensor is a view of (keys unless identity,
    # then per side order, pos, bucket, ranges, nseg), each view starting 16-byte aligned
    total: int


def _aligned(n: int) -> int:
    """n int32 elements rounded up to 16 bytes (Triton specializes on pointer alignment)."""
    return -(-n // 4) * 4


@functools.lru_cache(maxsize=256)
def _static(group: HeadGroup, block_q: int, block_k: int, B: int, Hg: int, T: int) -> _Static:
    big = (group.buckets + 1) * T
    if 2 * big >= 2**31:
        raise ValueError(f"(buckets + 1) * 2T = {2 * big} overflows int32 sort keys; use fewer buckets or shorter T")
    identity = group.layout is Layout.IDENTITY
    flags = predicate_flags(group)
    flags.pop("SAME_BUCKET")  # the bucket is part of every sort key already
    flags["IDENTITY"] = identity
    sides = []
    total = 0 if identity else _aligned(2 * B * Hg * T)
    for block, sentinel, dropped in ((block_q, QUERY_SENTINEL, DROPPED_Q_BUCKET), (block_k, KEY_SENTINEL, DROPPED_K_BUCKET)):
        nb = triton.cdiv(T, block)
        S = max(1, min(block, group.buckets))
        sides.append((nb, block, S, sentinel, dropped))
        total += 3 * _aligned(B * Hg * T) + _aligned(B * Hg * nb * S * 4) + _aligned(B * Hg * nb)
    return _Static(
        identity=identity,
        keep=group.has(Keep),
        has_bucket=group.has(SameBucket),
        big=big,
        n_steps=max(1, math.ceil(math.log2(T + 1))),
        flags=flags,
        sides=tuple(sides),
        total=total,
    )


def build_group(
    program: Program,
    group: HeadGroup,
    heads: tuple[int, ...],
    dec,
    *,
    batch: int,
    n_heads: int,
    seqlen: int,
    device: torch.device,
) -> PreparedGroup:
    """:func:`tilesparse.ir.prepare_group` computed by the fused kernels."""
    B, T, Hg = batch, seqlen, len(heads)
    st = _static(group, program.block_q, program.block_k, B, Hg, T)
    # every index tensor is a view of one int32 buffer: one allocation per call
    buf = torch.empty(st.total, dtype=torch.int32, device=device)
    used = 0

    def take(*shape: int) -> torch.Tensor:
        nonlocal used
        n = math.prod(shape)
        t = buf[used : used + n].view(shape)
        used += _aligned(n)
        return t

    sorted_keys: list[torch.Tensor | None] = [None, None]
    orders: list[torch.Tensor | None] = [None, None]
    if not st.identity:
        sel = lambda t: _select(t, heads, n_heads).contiguous()  # noqa: E731
        keys = take(2, B, Hg, T)
        q_keep, k_keep = (sel(dec.q_keep), sel(dec.k_keep)) if st.keep else (keys, keys)
        q_bkt, k_bkt = (sel(dec.q_bucket), sel(dec.k_bucket)) if st.has_bucket else (keys, keys)
        block = 1024
        _sort_keys[(triton.cdiv(T, block), B * Hg, 2)](
            q_keep, k_keep, q_bkt, k_bkt, keys[0], keys[1], T, st.big,
            HAS_KEEP=st.keep, HAS_BUCKET=st.has_bucket, BLOCK=block,
        )  # fmt: skip
        skeys, order = torch.sort(keys, dim=-1)  # both sides in one call
        sorted_keys, orders = [skeys[0], skeys[1]], [order[0], order[1]]
    out = {}
    for side, (nb, block, S, sentinel, dropped) in enumerate(st.sides):
        order_out, pos_out, bkt_out = take(B, Hg, T), take(B, Hg, T), take(B, Hg, T)
        ranges = take(B, Hg, nb, S, 4)
        nseg = take(B, Hg, nb)
        skey, other = sorted_keys[side], sorted_keys[1 - side]
        dummy = order_out  # identity reads no keys
        _build_side[(nb, B * Hg)](
            dummy if skey is None else skey, dummy if orders[side] is None else orders[side],
            dummy if other is None else other, order_out, pos_out, bkt_out, ranges, nseg,
            T, nb, st.big, st.n_steps,
            SENTINEL=sentinel, DROPPED_BUCKET=dropped, BLOCK=block, MAX_SEG=S, QUERY_SIDE=side == 0, **st.flags,
        )  # fmt: skip
        out[side] = (order_out, pos_out, bkt_out, ranges, nseg)
    return assemble_group(program, group, heads, dec, n_heads, T, device, out[0], out[1])
