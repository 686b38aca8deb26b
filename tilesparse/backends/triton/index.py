"""The layout and ranges stages fused into Triton kernels: the same index tensors as
:func:`tilesparse.ir.prepare_group`, in two to four launches instead of ~70 small torch ops
(one for the identity layout, on a pool entry's first call only: it reads no decision, so later
calls only zero the non-finite flags).

1. ``_sort_keys`` (one launch, both sides): key = bucket * T + position for a kept row,
   ``big + position`` for a dropped one (int32), and per chunk of rows a histogram of the
   rows' categories (the bucket, or ``buckets`` for a dropped row);
2. ``_scan_counts`` and ``_scatter_sorted`` (one launch each, both sides; the scatter alone
   while a side's chunk counts are few, ``_FUSED_SCAN``): a stable counting sort of the keys
   by category. Positions ascend within a chunk and chunks ascend, so the
   result is the keys in ascending order, as a sort would give, in O(T); a row's destination
   is its category's start, plus the rows of that category in earlier chunks, plus those
   before it in its own chunk (skipped for the identity layout). For sides of at most
   ``_FUSED_SORT_ROWS`` rows, steps 1 and 2 are one launch, ``_sort_scatter``: each of its
   programs computes its chunk's keys and counts its whole side itself;
3. ``_build_sides`` (one launch, both sides): per block of the layout, the int32 row
   order, position and bucket of every row, the bucket segments (run starts and ends found from the
   neighbouring keys, numbered with a cumulative sum) and each segment's row range on the
   other side, by vectorized binary searches in the other side's sorted keys.

The torch implementation in ``ir/prepare.py`` is the specification: tests check the two give
identical tensors (tests/backends/triton/test_index.py on the CPU interpreter,
tests/gpu/test_triton_gpu.py on the GPU).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import triton
import triton.language as tl

from ...ir import (
    DROPPED_K_BUCKET,
    DROPPED_Q_BUCKET,
    KEY_SENTINEL,
    QUERY_SENTINEL,
    AttentionInputs,
    FeatureDotScore,
    HeadGroup,
    Keep,
    Layout,
    PreparedGroup,
    Program,
    SameBucket,
    max_segments,
)
from ...ir.prepare import assemble_group, copy_group, feature_supports, head_flags, head_map, select_heads
from ..buffers import BufferPool
from ..switch import switched_on
from .features import unbound_features_on
from .launch import Site, kept_args, lean
from .nonfinite import split_counters
from .op import predicate_flags

__all__ = ["bind_group", "build_group", "index_build_reasons", "rebuilt_identity", "separate_sort"]


# a sort key above every real one (they stay below 2 * big < 2^31): lanes past a chunk's end
_KEY_PAST_END = tl.constexpr(2**31 - 1)


@triton.jit
def _chunk_keys(Q_KEEP, K_KEEP, Q_BKT, K_BKT, DENSE, bh, base, rows, ok, side, seqlen, big,
                HAS_KEEP: tl.constexpr, HAS_BUCKET: tl.constexpr, HAS_DENSE: tl.constexpr, N_CAT: tl.constexpr):
    """Sort keys and categories of rows ``rows`` of one side: bucket * T + position, or big +
    position when dropped; the bucket, or ``N_CAT - 1`` when dropped. HAS_DENSE: where
    ``DENSE[bh]`` is set (a PerHead's dense head fused into the group) every row is kept in
    bucket 0, as if its decisions said so."""
    key = rows
    cat = tl.zeros_like(rows)
    if HAS_BUCKET:
        if side == 0:
            b = tl.load(Q_BKT + base + rows, mask=ok, other=0)
        else:
            b = tl.load(K_BKT + base + rows, mask=ok, other=0)
        cat = b.to(tl.int32)
        key = cat * seqlen + rows
    if HAS_KEEP:
        if side == 0:
            keep = tl.load(Q_KEEP + base + rows, mask=ok, other=0)
        else:
            keep = tl.load(K_KEEP + base + rows, mask=ok, other=0)
        key = tl.where(keep != 0, key, big + rows)
        cat = tl.where(keep != 0, cat, N_CAT - 1)
    if HAS_DENSE:
        dense = tl.load(DENSE + bh) != 0
        key = tl.where(dense, rows, key)
        cat = tl.where(dense, 0, cat)
    return key, cat


@triton.jit(do_not_specialize=["seqlen", "big", "n_chunks"])
def _sort_keys(Q_KEEP, K_KEEP, Q_BKT, K_BKT, DENSE, KEYS, COUNTS, seqlen, big, n_chunks,
               HAS_KEEP: tl.constexpr, HAS_BUCKET: tl.constexpr, N_CAT: tl.constexpr, CAT_PAD: tl.constexpr,
               BLOCK: tl.constexpr, HAS_DENSE: tl.constexpr = False):
    """Sort keys of one chunk of one side (:func:`_chunk_keys`), and the chunk's count of rows
    per category (bucket; ``N_CAT - 1``: dropped)."""
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    side = tl.program_id(2)
    n_bh = tl.num_programs(1)
    base = bh.to(tl.int64) * seqlen
    rows = pid * BLOCK + tl.arange(0, BLOCK)
    ok = rows < seqlen
    key, cat = _chunk_keys(Q_KEEP, K_KEEP, Q_BKT, K_BKT, DENSE, bh, base, rows, ok, side, seqlen, big,
                           HAS_KEEP, HAS_BUCKET, HAS_DENSE, N_CAT)
    tl.store(KEYS + (side * n_bh).to(tl.int64) * seqlen + base + rows, key, mask=ok)
    counts = tl.histogram(cat, CAT_PAD, mask=ok)
    tl.store(COUNTS + ((side * n_bh + bh).to(tl.int64) * n_chunks + pid) * CAT_PAD + tl.arange(0, CAT_PAD), counts)


@triton.jit(do_not_specialize=["n_chunks"])
def _scan_counts(COUNTS, n_chunks, CAT_PAD: tl.constexpr, CHUNKS: tl.constexpr):
    """In place, per (side, batch x head): each chunk's count per category becomes where the
    chunk's first row of that category goes (category start + earlier chunks' rows).
    CHUNKS chunks' counts at a time."""
    row = COUNTS + tl.program_id(0).to(tl.int64) * n_chunks * CAT_PAD
    cats = tl.arange(0, CAT_PAD)
    chunks = tl.arange(0, CHUNKS)
    total = tl.zeros([CAT_PAD], dtype=tl.int32)
    for c0 in range(0, n_chunks, CHUNKS):
        ok = (c0 + chunks < n_chunks)[:, None]
        total += tl.sum(tl.load(row + (c0 + chunks)[:, None] * CAT_PAD + cats[None, :], mask=ok, other=0), 0)
    running = tl.cumsum(total, 0) - total  # each category's first row
    for c0 in range(0, n_chunks, CHUNKS):
        ok = (c0 + chunks < n_chunks)[:, None]
        ptrs = row + (c0 + chunks)[:, None] * CAT_PAD + cats[None, :]
        here = tl.load(ptrs, mask=ok, other=0)
        tl.store(ptrs, running[None, :] + tl.cumsum(here, 0) - here, mask=ok)
        running += tl.sum(here, 0)


@triton.jit(do_not_specialize=["seqlen", "big", "n_chunks"])
def _scatter_sorted(KEYS, OFFSETS, SKEY, ORDER, seqlen, big, n_chunks,
                    N_CAT: tl.constexpr, CAT_PAD: tl.constexpr, BLOCK: tl.constexpr,
                    FUSED_SCAN: tl.constexpr, CHUNKS_PAD: tl.constexpr, BY_SORT: tl.constexpr):
    """Each row of one chunk to its place in the sorted order (:func:`_scatter_chunk`). FUSED_SCAN:
    OFFSETS holds the raw counts (no ``_scan_counts`` launch) and each program sums its side's
    (at most CHUNKS_PAD) chunks itself: the same starts."""
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    side = tl.program_id(2)
    row_base = (side * tl.num_programs(1) + bh).to(tl.int64) * seqlen
    rows = pid * BLOCK + tl.arange(0, BLOCK)
    ok = rows < seqlen
    key = tl.load(KEYS + row_base + rows, mask=ok, other=0)
    cat = tl.where(key < big, key // seqlen, N_CAT - 1)
    cats = tl.arange(0, CAT_PAD)
    if FUSED_SCAN:
        # category start (every chunk's rows of earlier categories) + earlier chunks' rows
        chunks = tl.arange(0, CHUNKS_PAD)
        ptrs = OFFSETS + (side * tl.num_programs(1) + bh).to(tl.int64) * n_chunks * CAT_PAD
        counts = tl.load(ptrs + chunks[:, None] * CAT_PAD + cats[None, :], mask=(chunks < n_chunks)[:, None], other=0)
        total = tl.sum(counts, 0)
        earlier = tl.sum(tl.where((chunks < pid)[:, None], counts, 0), 0)
        start = tl.cumsum(total, 0) - total + earlier
    else:
        start = tl.load(OFFSETS + ((side * tl.num_programs(1) + bh).to(tl.int64) * n_chunks + pid) * CAT_PAD + cats)
    _scatter_chunk(key, cat, rows, ok, start, SKEY, ORDER, row_base, seqlen, big, N_CAT, CAT_PAD, BLOCK, BY_SORT)


@triton.jit(do_not_specialize=["seqlen", "big"])
def _sort_scatter(Q_KEEP, K_KEEP, Q_BKT, K_BKT, DENSE, SKEY, ORDER, seqlen, big,
                  HAS_KEEP: tl.constexpr, HAS_BUCKET: tl.constexpr, N_CAT: tl.constexpr, CAT_PAD: tl.constexpr,
                  BLOCK: tl.constexpr, BY_SORT: tl.constexpr, COUNT_BLOCK: tl.constexpr,
                  HAS_DENSE: tl.constexpr = False):
    """:func:`_sort_keys` and :func:`_scatter_sorted` in one launch, for sides of a few chunks
    (``_FUSED_SORT_ROWS``): each program computes its chunk's keys from the decisions and counts its
    side's rows per category itself, COUNT_BLOCK rows at a time (every row of the side, those
    before its chunk apart), instead of reading a histogram launch's counts."""
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    side = tl.program_id(2)
    base = bh.to(tl.int64) * seqlen
    first = pid * BLOCK
    total = tl.zeros([CAT_PAD], dtype=tl.int32)
    earlier = tl.zeros([CAT_PAD], dtype=tl.int32)
    for c0 in range(0, seqlen, COUNT_BLOCK):
        rows = c0 + tl.arange(0, COUNT_BLOCK)
        ok = rows < seqlen
        _, cat = _chunk_keys(Q_KEEP, K_KEEP, Q_BKT, K_BKT, DENSE, bh, base, rows, ok, side, seqlen, big,
                             HAS_KEEP, HAS_BUCKET, HAS_DENSE, N_CAT)
        total += tl.histogram(cat, CAT_PAD, mask=ok)
        earlier += tl.histogram(cat, CAT_PAD, mask=ok & (rows < first))
    start = tl.cumsum(total, 0) - total + earlier
    rows = first + tl.arange(0, BLOCK)
    ok = rows < seqlen
    key, cat = _chunk_keys(Q_KEEP, K_KEEP, Q_BKT, K_BKT, DENSE, bh, base, rows, ok, side, seqlen, big,
                           HAS_KEEP, HAS_BUCKET, HAS_DENSE, N_CAT)
    row_base = (side * tl.num_programs(1) + bh).to(tl.int64) * seqlen
    _scatter_chunk(key, cat, rows, ok, start, SKEY, ORDER, row_base, seqlen, big, N_CAT, CAT_PAD, BLOCK, BY_SORT)


@triton.jit
def _scatter_chunk(key, cat, rows, ok, start, SKEY, ORDER, row_base, seqlen, big,
                   N_CAT: tl.constexpr, CAT_PAD: tl.constexpr, BLOCK: tl.constexpr, BY_SORT: tl.constexpr):
    """Rows ``rows`` of one chunk (sort keys ``key``, categories ``cat``) to their places: a
    row's key to SKEY, its position to ORDER, at its category's ``start`` plus the number of the
    chunk's earlier rows of its category. BY_SORT finds those ranks by sorting the chunk's keys
    (BLOCK log^2 BLOCK work); otherwise by a running count over a (rows x categories) one-hot
    tile (BLOCK x CAT_PAD work: cheaper for a few categories)."""
    if BY_SORT:
        # the chunk's keys sorted: a category's rows in row order (a key grows with its row),
        # so the i-th sorted key's rank in its category is i minus the category's first place
        # in the chunk; lanes past the end sort last, so the filled places are ``ok``'s lanes
        sorted_key = tl.sort(tl.where(ok, key, _KEY_PAST_END))
        dropped = sorted_key >= big
        sorted_cat = tl.where(ok, tl.where(dropped, N_CAT - 1, sorted_key // seqlen), 0)
        here = tl.histogram(cat, CAT_PAD, mask=ok)
        place = tl.arange(0, BLOCK)
        dest = tl.gather(start, sorted_cat, 0) + place - tl.gather(tl.cumsum(here, 0) - here, sorted_cat, 0)
        tl.store(SKEY + row_base + dest, sorted_key, mask=ok)
        tl.store(ORDER + row_base + dest, tl.where(dropped, sorted_key - big, sorted_key - sorted_cat * seqlen),
                 mask=ok)
    else:
        cats = tl.arange(0, CAT_PAD)
        one_hot = ((cat[:, None] == cats[None, :]) & ok[:, None]).to(tl.int32)
        before = tl.sum((tl.cumsum(one_hot, 0) - one_hot) * one_hot, 1)
        dest = tl.sum(one_hot * start[None, :], 1) + before
        tl.store(SKEY + row_base + dest, key, mask=ok)
        tl.store(ORDER + row_base + dest, rows, mask=ok)


@triton.jit
def _bound_in_order(target, seqlen, RIGHT: tl.constexpr):
    """:func:`_bound2`'s count when the other side's keys are 0..T-1 in order (IDENTITY)."""
    if RIGHT:
        return tl.minimum(tl.maximum(target + 1, 0), seqlen)
    return tl.minimum(tl.maximum(target, 0), seqlen)


@triton.jit
def _bound2(OTHER, target_a, target_b, seqlen, n_steps, RIGHT_A: tl.constexpr, RIGHT_B: tl.constexpr,
            IDENTITY: tl.constexpr):
    """Per lane, for each of two targets: how many of the other side's sorted keys are < the
    target (<= with RIGHT_*). A binary search is a chain of dependent loads (the build's time at
    short T): the two run in one loop, so that each step's two loads are in flight together."""
    if IDENTITY:
        return _bound_in_order(target_a, seqlen, RIGHT_A), _bound_in_order(target_b, seqlen, RIGHT_B)
    lo_a = tl.zeros_like(target_a)
    hi_a = tl.zeros_like(target_a) + seqlen
    lo_b = tl.zeros_like(target_b)
    hi_b = tl.zeros_like(target_b) + seqlen
    for _ in range(n_steps):
        active_a = lo_a < hi_a
        active_b = lo_b < hi_b
        mid_a = (lo_a + hi_a) // 2
        mid_b = (lo_b + hi_b) // 2
        v_a = tl.load(OTHER + mid_a, mask=active_a, other=0)
        v_b = tl.load(OTHER + mid_b, mask=active_b, other=0)
        if RIGHT_A:
            go_a = v_a <= target_a
        else:
            go_a = v_a < target_a
        if RIGHT_B:
            go_b = v_b <= target_b
        else:
            go_b = v_b < target_b
        lo_a = tl.where(active_a & go_a, mid_a + 1, lo_a)
        hi_a = tl.where(active_a & (~go_a), mid_a, hi_a)
        lo_b = tl.where(active_b & go_b, mid_b + 1, lo_b)
        hi_b = tl.where(active_b & (~go_b), mid_b, hi_b)
    return lo_a, lo_b


@triton.jit
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
    slot = rng + seg * 4
    # each side takes two searches of the other side's keys, run together (_bound2)
    if not CAUSAL:
        # the segment's whole bucket
        lo, hi = _bound2(other, c, c + seqlen, seqlen, n_steps, False, False, IDENTITY)
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
        # unmasked: keys at or before its earliest query. One search of c + pos gives both:
        # pos is the segment's earliest on its start lane, its latest on its end lane
        lo, at_pos = _bound2(other, c, c + pos, seqlen, n_steps, False, not STRICT, IDENTITY)
        full_hi = tl.where(uniform, tl.maximum(at_pos, lo), lo)
        tl.store(slot, lo, mask=starts)
        tl.store(slot + 1, lo, mask=starts)
        tl.store(slot + 2, full_hi, mask=starts)
        tl.store(slot + 3, at_pos, mask=ends)
    else:
        # queries of the segment's bucket at or after its earliest key (after, if STRICT);
        # unmasked: queries at or after its latest key. One search of c + pos gives both, as
        # on the query side (kmin on the start lane, kmax on the end lane)
        at_pos, hi = _bound2(other, c + pos, c + seqlen, seqlen, n_steps, STRICT, False, IDENTITY)
        lo = at_pos
        tl.store(slot, lo, mask=starts)
        # tl.where, not `starts & ~uniform`: Triton 3.9's interpreter rejects a block & scalar mask
        tl.store(slot + 1, lo, mask=tl.where(uniform, False, starts))
        tl.store(slot + 2, tl.where(uniform, hi, lo), mask=starts)
        tl.store(slot + 3, hi, mask=starts)
        tl.store(slot + 1, at_pos, mask=tl.where(uniform, ends, False))
    # unused segment slots are zero
    unused = (lane >= nseg) & (lane < MAX_SEG)
    zero = tl.zeros_like(lane)
    for j in tl.static_range(4):
        tl.store(rng + lane * 4 + j, zero, mask=unused)


@triton.jit(do_not_specialize=["seqlen", "nb_q", "nb_k", "big", "n_steps"])
def _build_sides(Q_SKEY, Q_ORDER, K_SKEY, K_ORDER,
                 Q_ORDER_OUT, Q_POS_OUT, Q_BKT_OUT, Q_RANGES, Q_NSEG,
                 K_ORDER_OUT, K_POS_OUT, K_BKT_OUT, K_RANGES, K_NSEG, FLAGS,
                 seqlen, nb_q, nb_k, big, n_steps,
                 Q_SENTINEL: tl.constexpr, K_SENTINEL: tl.constexpr, Q_DROPPED: tl.constexpr, K_DROPPED: tl.constexpr,
                 BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr, SEG_Q: tl.constexpr, SEG_K: tl.constexpr,
                 CAUSAL: tl.constexpr, STRICT: tl.constexpr, NOT_SELF: tl.constexpr, IDENTITY: tl.constexpr):
    """Both sides' :func:`_build_side` in one launch: programs (block, batch x head, side); a
    program past its side's blocks has nothing to do (the sides' block counts differ). The
    first program also zeroes the call's two non-finite flags (nonfinite.py), which the
    attention kernels launched after it set, and each program the split counter of its block
    after them (one per batch-head and block of the larger side: kernels._split_counters)."""
    pid = tl.program_id(0)
    if (pid == 0) & (tl.program_id(1) == 0) & (tl.program_id(2) == 0):
        tl.store(FLAGS + tl.arange(0, 2), tl.zeros([2], dtype=tl.int32))
    if tl.program_id(2) == 0:  # the grid's first axis: the larger side's blocks
        tl.store(FLAGS + 2 + tl.program_id(1).to(tl.int64) * tl.num_programs(0) + pid, 0)
        if pid < nb_q:
            _build_side(Q_SKEY, Q_ORDER, K_SKEY, Q_ORDER_OUT, Q_POS_OUT, Q_BKT_OUT, Q_RANGES, Q_NSEG,
                        seqlen, nb_q, big, n_steps, Q_SENTINEL, Q_DROPPED, BLOCK_Q, SEG_Q, True,
                        CAUSAL, STRICT, NOT_SELF, IDENTITY)
    else:
        if pid < nb_k:
            _build_side(K_SKEY, K_ORDER, Q_SKEY, K_ORDER_OUT, K_POS_OUT, K_BKT_OUT, K_RANGES, K_NSEG,
                        seqlen, nb_k, big, n_steps, K_SENTINEL, K_DROPPED, BLOCK_K, SEG_K, False,
                        CAUSAL, STRICT, NOT_SELF, IDENTITY)


@dataclass(frozen=True)
class _Static:
    """What a group's index build launches with that only the sizes determine (cached)."""

    identity: bool
    keep: bool
    has_bucket: bool
    big: int
    n_steps: int
    # the counting sort: categories (buckets, then "dropped"), padded to a power of two;
    # whether the scatter ranks by sorting; rows per chunk; chunks per side; chunks per step
    # of the scan
    n_cat: int
    cat_pad: int
    by_sort: bool
    sort_block: int
    n_chunks: int
    scan_chunks: int
    # the scatter reads every chunk's counts itself (no scan launch): while they are few
    fused_scan: bool
    chunks_pad: int
    # the keys and the scatter in one launch (_sort_scatter): short sides
    fused_sort: bool
    flags: dict
    # per side: (blocks, rows per block, segment slots, sentinel, dropped bucket)
    sides: tuple[tuple[int, int, int, int, int], tuple[int, int, int, int, int]]
    # int32 elements of the one buffer every index tensor is a view of (keys unless identity,
    # then per side order, pos, bucket, ranges, nseg, then the two non-finite flags and the
    # split counters after them), each view starting 16-byte aligned (the backward pass's flag
    # aside: 4 bytes after the forward's)
    total: int
    # (shape, strides, offset) of each view, in that order: the sort's scratch (keys, counts,
    # then per side its sorted keys and order) unless identity, then per side the five outputs,
    # then the flags (both with the split counters, the forward pass's, the backward pass's)
    views: tuple = ()


# the counting sort's chunks: up to _ONE_HOT_CATS padded categories (QKDrop alone: 2) the
# scatter ranks a chunk's rows over a one-hot tile of _ONE_HOT_ROWS rows; with more, by sorting
# chunks of _SORT_ROWS rows (Triton's build at B=1, H=32, T=32k: 0.81 -> 0.19 ms at 64 buckets,
# 0.25 -> 0.17 ms at 16; 256 rows beat 512 and 1024: benchmarks/results/index_kernels_*_h200.jsonl)
_ONE_HOT_CATS = 4
_ONE_HOT_ROWS = 1024
_SORT_ROWS = 256
# elements of the scan's (chunks x categories) tile
_SCAN_TILE = 2048
# most (chunks x categories) counts each scatter program sums itself instead of a scan launch:
# one launch fewer while the counts are small (T <= 16k at 16 buckets), no quadratic reads beyond
_FUSED_SCAN = 2048
# longest sides whose keys and scatter run as one launch (_sort_scatter): each of its programs
# counts every row of its side, so the side's decisions are read once per chunk. At T=4,096
# (16 chunks with buckets) one launch fewer took 13 us off a call's host time and left its GPU
# time even; at 16,384 QKDrop's 16 chunks of 1,024 rows made the GPU time 1-4% longer (B=1, H=16
# and H=32, run 172: benchmarks/results/call_times_sort_run172_h200.json)
_FUSED_SORT_ROWS = 4096
# rows each _sort_scatter program counts at a time
_COUNT_ROWS = 1024
_SEPARATE_SORT = [False]  # separate_sort() in force
_REBUILT_IDENTITY = [False]  # rebuilt_identity() in force


def rebuilt_identity():
    """Inside the block an identity layout's index tensors are built every call, as before they
    were kept per pool entry (A/B timing: ``call_times.py --ab kept-identity``)."""
    return switched_on(_REBUILT_IDENTITY)


def separate_sort():
    """Builds inside the block launch the keys and their scatter separately (tests, benchmarks)."""
    return switched_on(_SEPARATE_SORT)


def _by_sort(cat_pad: int) -> bool:
    """Whether the scatter ranks a chunk's rows by sorting them (many categories)."""
    return cat_pad > _ONE_HOT_CATS


def _sort_block(cat_pad: int) -> int:
    """Rows per chunk of the counting sort."""
    return _SORT_ROWS if _by_sort(cat_pad) else _ONE_HOT_ROWS


def index_build_reasons(group: HeadGroup, seqlen: int) -> list[str]:
    """Why the counting sort cannot build ``group``'s index for sequences of ``seqlen``: its
    per-category counts (padded to a power of two) must fit one Triton tensor 16 times over,
    and the sort keys int32."""
    if group.layout is Layout.IDENTITY:
        return []
    reasons = []
    cat_pad = triton.next_power_of_2(group.buckets + 1)
    if 16 * cat_pad > tl.TRITON_MAX_TENSOR_NUMEL:
        most = tl.TRITON_MAX_TENSOR_NUMEL // 16 - 1
        reasons.append(f"buckets={group.buckets} > {most}: the index build's counting sort handles at most {most}")
    if 2 * (group.buckets + 1) * seqlen >= 2**31:
        reasons.append(f"(buckets + 1) * 2T = {2 * (group.buckets + 1) * seqlen} overflows the index build's int32 sort keys")
    return reasons


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
    n_cat = group.buckets + 1
    cat_pad = triton.next_power_of_2(n_cat)
    sort_block = _sort_block(cat_pad)
    n_chunks = triton.cdiv(T, sort_block)
    # unsorted keys, sorted keys, orders (both sides each), the per-chunk category counts
    total = 0 if identity else 3 * _aligned(2 * B * Hg * T) + _aligned(2 * B * Hg * n_chunks * cat_pad)
    for block, sentinel, dropped in ((block_q, QUERY_SENTINEL, DROPPED_Q_BUCKET), (block_k, KEY_SENTINEL, DROPPED_K_BUCKET)):
        nb = triton.cdiv(T, block)
        S = max_segments(block, group.buckets)
        sides.append((nb, block, S, sentinel, dropped))
        total += 3 * _aligned(B * Hg * T) + _aligned(B * Hg * nb * S * 4) + _aligned(B * Hg * nb)
    total += _aligned(2 + _counters(B, Hg, sides))  # the non-finite flags, then the split counters
    fused_scan = triton.next_power_of_2(n_chunks) * cat_pad <= _FUSED_SCAN
    views, used = _views(identity, B, Hg, T, n_chunks, cat_pad, sides)
    assert used == total, f"index views end at {used}, the buffer holds {total}"
    return _Static(
        identity=identity,
        keep=group.has(Keep),
        has_bucket=group.has(SameBucket),
        big=big,
        n_steps=max(1, math.ceil(math.log2(T + 1))),
        n_cat=n_cat,
        cat_pad=cat_pad,
        by_sort=_by_sort(cat_pad),
        sort_block=sort_block,
        n_chunks=n_chunks,
        scan_chunks=max(1, min(triton.next_power_of_2(n_chunks), _SCAN_TILE // cat_pad)),
        fused_scan=fused_scan,
        chunks_pad=triton.next_power_of_2(n_chunks) if fused_scan else 1,
        fused_sort=T <= _FUSED_SORT_ROWS,
        flags=flags,
        sides=tuple(sides),
        total=total,
        views=views,
    )


def _counters(B: int, Hg: int, sides) -> int:
    """The split counters after the flags (nonfinite.split_counters), each zeroed by its block's
    program of the build's last launch."""
    return split_counters(B * Hg, *(nb for nb, *_ in sides))


def _views(identity: bool, B: int, Hg: int, T: int, n_chunks: int, cat_pad: int, sides) -> tuple:
    """Where each index tensor lies in the build's one buffer (see ``_Static.views``)."""
    out = []
    used = 0

    def take(*shape: int, at: int | None = None) -> None:
        nonlocal used
        strides = [1] * len(shape)
        for i in range(len(shape) - 2, -1, -1):
            strides[i] = strides[i + 1] * shape[i + 1]
        out.append((tuple(shape), tuple(strides), used if at is None else at))
        if at is None:
            used += _aligned(math.prod(shape))

    if not identity:
        n = B * Hg * T
        take(2, B, Hg, T)  # unsorted keys, both sides
        skeys, order = used, used + _aligned(2 * n)
        used += 2 * _aligned(2 * n)
        take(2, B * Hg, n_chunks, cat_pad)
        for start in (skeys, order):  # each side's sorted keys, then each side's order
            take(B, Hg, T, at=start)
            take(B, Hg, T, at=start + n)
    for nb, _, S, _, _ in sides:
        take(B, Hg, T)
        take(B, Hg, T)
        take(B, Hg, T)
        take(B, Hg, nb, S, 4)
        take(B, Hg, nb)
    flags = used
    # the non-finite flags with the split counters after them, then the forward pass's flag
    # and the backward pass's
    take(2 + _counters(B, Hg, sides))
    take(1, at=flags)
    take(1, at=flags + 1)
    return tuple(out), used


def build_group(
    program: Program, group: HeadGroup, heads: tuple[int, ...], dec, inputs: AttentionInputs
) -> PreparedGroup:
    """:func:`tilesparse.ir.prepare_group` computed by the fused kernels, at the sizes and on the
    device of ``inputs`` (the arguments of :meth:`tilesparse.backends.builder.IndexBuilder.build`)."""
    return bind_group(program, group, heads, inputs)(dec, inputs)


def bind_group(
    program: Program, group: HeadGroup, heads: tuple[int, ...], inputs: AttentionInputs,
    dense_heads: tuple[int, ...] = (),
) -> Callable[[object, AttentionInputs], PreparedGroup]:
    """:func:`build_group` for every call with the sizes and device of ``inputs``: the buffer's
    layout, the grids and the launches' constants are worked out here, once; a call takes a
    buffer and its views from the build's pool (``backends/buffers.py``) and launches.

    ``dense_heads`` (query heads among ``heads``: a PerHead's dense heads fused into the group)
    are built as if their decisions kept every token in bucket 0 (``execute.with_dense_heads``),
    by the sort's own launch: a per-(batch, head) flag kept on the device (``head_flags``,
    made once), where the decisions would otherwise be copied and filled every call."""
    B, T, Hg, H, device = inputs.batch, inputs.seqlen, len(heads), inputs.heads, inputs.device
    st = _static(group, program.block_q, program.block_k, B, Hg, T)
    heads = tuple(heads)
    hmap = head_map(heads, device)
    if bad := [h for h in dense_heads if h not in heads]:
        raise ValueError(f"dense_heads {bad} are not among the group's heads {list(heads)}")
    has_dense = bool(dense_heads) and not st.identity and (st.keep or st.has_bucket)
    dense = head_flags(heads, tuple(dense_heads), B, device) if has_dense else None
    sort_keys, scan_counts, scatter_sorted, sort_scatter, build_sides = (
        lean(f) for f in (_sort_keys, _scan_counts, _scatter_sorted, _sort_scatter, _build_sides)
    )
    grid = (st.n_chunks, B * Hg, 2)
    sort = dict(N_CAT=st.n_cat, CAT_PAD=st.cat_pad, BLOCK=st.sort_block)
    # HAS_DENSE only where set: every other build launches the sort as before
    keys_constants = dict(HAS_KEEP=st.keep, HAS_BUCKET=st.has_bucket, **sort)
    if has_dense:
        keys_constants["HAS_DENSE"] = True
    scan_constants = dict(CAT_PAD=st.cat_pad, CHUNKS=st.scan_chunks)
    scatter_constants = dict(**sort, FUSED_SCAN=st.fused_scan, CHUNKS_PAD=st.chunks_pad, BY_SORT=st.by_sort)
    sort_scatter_constants = dict(**keys_constants, BY_SORT=st.by_sort, COUNT_BLOCK=_COUNT_ROWS)
    (nb_q, block_q, seg_q, q_sentinel, q_dropped), (nb_k, block_k, seg_k, k_sentinel, k_dropped) = st.sides
    sides_grid = (max(nb_q, nb_k), B * Hg, 2)
    sides_constants = dict(
        Q_SENTINEL=q_sentinel, K_SENTINEL=k_sentinel, Q_DROPPED=q_dropped, K_DROPPED=k_dropped,
        BLOCK_Q=block_q, BLOCK_K=block_k, SEG_Q=seg_q, SEG_K=seg_k, **st.flags,
    )  # fmt: skip
    sides_scalars = (T, nb_q, nb_k, st.big, st.n_steps)
    sort_site = Site(sort_scatter, grid, sort_scatter_constants)
    sides_site = Site(build_sides, sides_grid, sides_constants)

    def sel(t):
        return select_heads(t, heads, H).contiguous()

    pool = BufferPool(st.total, st.views, device)
    features = isinstance(group.score, FeatureDotScore)  # supports from the decisions: the call's own

    def build(dec, inputs: AttentionInputs) -> PreparedGroup:
        # every index tensor is a view of one int32 buffer, lent by the pool (buffers.py)
        entry = pool.take()
        try:
            q_out, k_out, flag_pair = fill(entry[1], dec, entry[4])
            per_call = features and unbound_features_on()  # unbound_features(): assembled each call
            if entry[4] is not None and not per_call:
                # the entry's views, flags and head map: made once (a feature group's supports: the call's)
                g = copy_group(entry[4], **feature_supports(group, heads, dec, H)) if features else copy_group(entry[4])
            else:
                g = assemble_group(program, group, heads, dec, H, T, device, q_out, k_out, hmap=hmap, flags=flag_pair)
                if not per_call:  # the entry keeps a copy, not the group it lends, nor the call's supports
                    entry[4] = copy_group(g, q_support=None, k_support=None, fixed_args={})
        except BaseException:
            pool.give_back(entry)
            raise
        pool.lend(entry, g)
        return g

    def fill(views: list, dec, made: PreparedGroup | None = None) -> tuple:
        """The launches of one build into ``views``: each side's five tensors and the flags.
        ``made``: the group the entry keeps (None before its first build), whose ``fixed_args``
        keep the sides' launch arguments, all views of the entry's buffer, read once."""
        flags, flag_pair = views[-3], tuple(views[-2:])
        kept = made.fixed_args if made is not None else None
        if st.identity:
            q_out, k_out = views[:5], views[5:10]
            if made is not None and not _REBUILT_IDENTITY[0]:
                # built by the entry's first call from the sizes alone (an identity layout reads
                # no decision): only the call's non-finite flags need their zeros, one fill
                # where the block pass took a Triton launch
                flags.zero_()
                return q_out, k_out, flag_pair
            dummy = q_out[0]  # identity reads no keys
            sides = (dummy, dummy, dummy, dummy)
        else:
            keys, counts, skey0, skey1, order0, order1 = views[:6]
            q_out, k_out = views[6:11], views[11:16]
            q_keep, k_keep = (sel(dec.q_keep), sel(dec.k_keep)) if st.keep else (keys, keys)
            q_bkt, k_bkt = (sel(dec.q_bucket), sel(dec.k_bucket)) if st.has_bucket else (keys, keys)
            decided = (q_keep, k_keep, q_bkt, k_bkt, keys if dense is None else dense)  # DENSE read under HAS_DENSE
            # both sides' sorted keys and orders, from side 0's start
            if st.fused_sort and not _SEPARATE_SORT[0]:
                sort_site(decided, kept_args(kept, "sort", lambda: (skey0, order0)), (T, st.big))
            else:
                sort_keys[grid](*decided, keys, counts, T, st.big, st.n_chunks, **keys_constants)
                if not st.fused_scan:
                    scan_counts[(2 * B * Hg,)](counts, st.n_chunks, **scan_constants)
                scatter_sorted[grid](keys, counts, skey0, order0, T, st.big, st.n_chunks, **scatter_constants)
            sides = (skey0, order0, skey1, order1)
        sides_site((), kept_args(kept, "sides", lambda: (*sides, *q_out, *k_out, flags)), sides_scalars)
        return q_out, k_out, flag_pair

    return build
