"""Tile-skipping attention kernels: forward, dQ (with delta) and dK/dV over a prepared IR program.

Every program handles one block of rows of one (batch, query head) and reads rows of Q, K, V,
dO through the layout's row orders and writes O, dQ, dK, dV at original positions: no reordered
copy of any tensor exists. For each bucket segment of its block it visits the tiles of the
segment's row range on the other side (``lo, full_lo, full_hi, hi`` in rows, converted to its
own tile width), running the tiles proven full with ``MASK=False`` (no mask arithmetic) and the
rest with the in-tile predicates (or, with ``SINGLE_LOOP``, every tile of the segment masked in
one loop: segments of a few tiles pipeline better as one loop than as three). The softmax is
SCFA's NaN-safe online softmax: a row with no kept key ends with l = 0, outputs zeros and
stores lse = +inf, so its gradients are zero.

An inf or NaN in the inputs reaches a row that does not keep its key only as 0 * inf = NaN
in a masked tile's product (masked probabilities are exact zeros), so an output the unchanged
variant computes with no inf or NaN in it is exact. Each unchanged variant sets a device-side
flag when a value it stores is not finite; the kernel's ``SANITIZE`` variant, launched after
it (nonfinite.py), exits at once unless the flag is set, and otherwise computes every output
again: in the masked tiles it reads non-finite k, v, q and dO as 0 and makes the rows that keep
such a key NaN, so 0 * inf never carries a value to a row that does not keep its key. Finite
inputs run the unchanged tile loops and one reduction over each output tile.

Scores are kept in log2 units (``qk_scale = scale * log2(e)``), as in the Triton tutorial.
Tested on CPU under TRITON_INTERPRET=1 (tests/backends/triton), compiled for sm_90 in CI
(tests/backends/triton/test_compile_sm90.py), and run on the H200 in tests/gpu.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .versions import CARRIED_SCALAR_FOLDED

# must match tilesparse.ir.semantics.KEY_SENTINEL (op.py checks it at import)
KEY_SENTINEL = tl.constexpr(1 << 30)

# per-step sizes are runtime values; keep Triton from specializing on their divisibility
_RUNTIME = ["seqlen", "seqlen_k", "n_blocks", "n_heads_g", "k_group", "v_group"]

# carry the previous segment's end through the segment loop, except on the Triton releases whose
# compiler folds that carried scalar to its initial value (see _tiles)
CARRY_PREV_HI = tl.constexpr(not CARRIED_SCALAR_FOLDED.affects())


@triton.jit
def _tile_keep(q_pos, k_pos, q_bkt, k_bkt, CAUSAL: tl.constexpr, STRICT: tl.constexpr,
               SAME_BUCKET: tl.constexpr, NOT_SELF: tl.constexpr):
    """Element predicates of a tile over broadcast (rows x cols) positions and buckets."""
    if CAUSAL:
        # sentinels fail on their own: a dropped query sits at -1, a dropped key at 2^30
        if STRICT:
            keep = k_pos < q_pos
        else:
            keep = k_pos <= q_pos
    else:
        keep = (q_pos >= 0) & (k_pos != KEY_SENTINEL)
    if SAME_BUCKET:
        keep = keep & (q_bkt == k_bkt)
    if NOT_SELF:
        keep = keep & (k_pos != q_pos)
    return keep


@triton.jit
def _nonfinite(x, ok):
    """Whether an element of tile ``x`` under ``ok`` is inf or NaN, one scalar a program (a
    finite row whose sum overflows counts too, which only costs the sanitizing loops' work)."""
    rows = tl.sum(tl.where(ok, x, 0.0), 1)  # a sum holding an inf or NaN is not finite
    return tl.max(tl.where(tl.abs(rows) < float("inf"), 0, 1), 0) != 0


@triton.jit
def _flag_nonfinite(x, ok, NONFINITE):
    """Set the flag at NONFINITE when :func:`_nonfinite` (every program that finds one stores
    the same 1)."""
    if _nonfinite(x, ok):
        tl.store(NONFINITE, 1)


@triton.jit
def _segments(NSEG, RANGES, ORDER, POS, BKT, pid_bh, n_blocks, block, length, MAX_SEG: tl.constexpr):
    """The number of segments of this program's block, a pointer to their row ranges, and the
    layout those ranges index: the other side's order, positions and buckets of this (batch,
    group head), ``length`` rows (keys: Tk; queries: Tq = seqlen)."""
    nseg = tl.load(NSEG + pid_bh.to(tl.int64) * n_blocks + block)
    rng = RANGES + (pid_bh.to(tl.int64) * n_blocks + block) * (MAX_SEG * 4)
    row_base = pid_bh.to(tl.int64) * length
    return nseg, rng, ORDER + row_base, POS + row_base, BKT + row_base


@triton.jit
def _tiles(rng, s, BLOCK: tl.constexpr, SINGLE_LOOP: tl.constexpr, prev_hi):
    """Segment s's row range (lo, full_lo, full_hi, hi) as tiles BLOCK wide: visit [lo, hi),
    unmasked [f0, f1); a tile the previous segment visited is skipped. With SINGLE_LOOP every
    tile is masked (f0 = f1 = hi): one pipelined loop over the segment (short segments).
    Returns (lo, f0, f1, hi, the ``prev_hi`` to pass for segment s + 1).

    Segments' row ranges increase (buckets are sorted), so the previous segment ends at its
    own hi, ``prev_hi`` as the segment loop carries it. Where the compiler folds that carried
    scalar to its initial value (Triton 3.6 and 3.7, versions.CARRIED_SCALAR_FOLDED; the
    interpreter does not), which would visit shared tiles twice, it is read back from memory
    and the loop carries nothing (the ``prev_hi`` returned is the one passed).
    """
    carried = prev_hi
    if not CARRY_PREV_HI:
        prev_hi = tl.cdiv(tl.load(rng + s * 4 - 1, mask=s > 0, other=0), BLOCK)
    lo_r = tl.load(rng + s * 4)
    flo_r = tl.load(rng + s * 4 + 1)
    fhi_r = tl.load(rng + s * 4 + 2)
    hi_r = tl.load(rng + s * 4 + 3)
    lo = tl.maximum(lo_r // BLOCK, prev_hi)
    hi = tl.maximum(tl.cdiv(hi_r, BLOCK), lo)
    f0 = tl.minimum(tl.maximum(tl.cdiv(flo_r, BLOCK), lo), hi)
    f1 = tl.minimum(tl.maximum(fhi_r // BLOCK, f0), hi)
    if CARRY_PREV_HI:
        carried = hi
    if SINGLE_LOOP:
        f0 = hi
        f1 = hi
    return lo, f0, f1, hi, carried


@triton.jit
def _key_tile_keep(K_POS, K_BKT, offs_n, n_ok, q_pos, q_bkt, CAUSAL: tl.constexpr, STRICT: tl.constexpr,
                   SAME_BUCKET: tl.constexpr, NOT_SELF: tl.constexpr):
    """The predicates of a (queries x keys) tile: the query block's positions and buckets
    against those of key layout rows ``offs_n``, read here (sentinels past the end)."""
    k_pos = tl.load(K_POS + offs_n, mask=n_ok, other=KEY_SENTINEL)
    k_bkt = k_pos
    if SAME_BUCKET:
        k_bkt = tl.load(K_BKT + offs_n, mask=n_ok, other=-2)
    return _tile_keep(q_pos[:, None], k_pos[None, :], q_bkt[:, None], k_bkt[None, :],
                      CAUSAL, STRICT, SAME_BUCKET, NOT_SELF)


@triton.jit
def _scheduled(HEAVY_FIRST: tl.constexpr, LAST_FIRST: tl.constexpr):
    """This program's block and (batch, group head) on a (blocks, B x Hg) grid.

    The GPU starts programs in the order of their linear id, axis 0 fastest. Read as it is, every
    head's blocks start together, so under a causal mask the heads started last bring their
    longest blocks last. With HEAVY_FIRST the id is read with the (batch, head) fastest and the
    blocks slowest, the last block first where LAST_FIRST (query blocks: the last holds the most
    keys; key blocks: the first holds the most queries): every head's longest programs start in
    the first wave, and the last wave is of short ones (``TileConfig.heavy_first``)."""
    block = tl.program_id(0)
    bh = tl.program_id(1)
    if HEAVY_FIRST:
        n_blocks = tl.num_programs(0)
        n_bh = tl.num_programs(1)
        linear = block + bh * n_blocks
        block = linear // n_bh
        bh = linear % n_bh
        if LAST_FIRST:
            block = n_blocks - 1 - block
    return block, bh


@triton.jit
def _program(HEAD_MAP, n_heads_g, seqlen, HEAVY_FIRST: tl.constexpr, LAST_FIRST: tl.constexpr, SPLIT: tl.constexpr):
    """This program's block and (batch, group head) (:func:`_scheduled`), its batch, head within
    the group, query head, the offset of its (batch, group head) rows in the index tensors, and
    its share of the block: with SPLIT shares a block, grid index i along the blocks is block
    i // SPLIT, share i % SPLIT (0 without)."""
    block, pid_bh = _scheduled(HEAVY_FIRST, LAST_FIRST)
    share = 0
    if SPLIT > 1:
        share = block % SPLIT
        block = block // SPLIT
    b = pid_bh // n_heads_g
    hg = pid_bh % n_heads_g
    h = tl.load(HEAD_MAP + hg)
    return block, pid_bh, b, hg, h, pid_bh.to(tl.int64) * seqlen, share


@triton.jit
def _layout_rows(ORDER, POS, BKT, row_base, block, seqlen, pos_other, bkt_other,
                 BLOCK: tl.constexpr, SAME_BUCKET: tl.constexpr):
    """Layout rows ``block``*BLOCK.. of one side: their offsets, in-range mask, original rows,
    positions (``pos_other`` past T) and buckets (the positions without SAME_BUCKET)."""
    offs = block * BLOCK + tl.arange(0, BLOCK)
    ok = offs < seqlen
    rows = tl.load(ORDER + row_base + offs, mask=ok, other=0)
    pos = tl.load(POS + row_base + offs, mask=ok, other=pos_other)
    bkt = pos
    if SAME_BUCKET:
        bkt = tl.load(BKT + row_base + offs, mask=ok, other=bkt_other)
    return offs, ok, rows, pos, bkt


@triton.jit
def _query_block(HEAD_MAP, Q_ORDER, Q_POS, Q_BKT, n_heads_g, seqlen,
                 HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, SAME_BUCKET: tl.constexpr,
                 HEAVY_FIRST: tl.constexpr, SPLIT: tl.constexpr = 1):
    """The query block of a forward or dQ program: :func:`_program`'s ids (the block last-first
    under HEAVY_FIRST), the block's layout rows (:func:`_layout_rows`) and the head-dim offsets
    with their mask, and the program's share of the block's key tiles (:func:`_program`)."""
    tl.static_assert(BLOCK_D >= HEAD_DIM, "BLOCK_D pads the head dim to a power of two")
    pid_m, pid_bh, b, hg, h, row_base, share = _program(HEAD_MAP, n_heads_g, seqlen, HEAVY_FIRST, True, SPLIT)
    offs_m, m_ok, q_rows, q_pos, q_bkt = _layout_rows(Q_ORDER, Q_POS, Q_BKT, row_base, pid_m, seqlen, -1, -1,
                                                      BLOCK_M, SAME_BUCKET)
    offs_d = tl.arange(0, BLOCK_D)
    return pid_m, pid_bh, b, hg, h, row_base, offs_m, m_ok, q_rows, q_pos, q_bkt, offs_d, offs_d < HEAD_DIM, share


@triton.jit
def _kv_bases(K, V, b, h, stride_kb, stride_kh, stride_vb, stride_vh, k_group, v_group):
    """Pointers to K and V of batch b and the kv head of query head h."""
    k_base = K + b.to(tl.int64) * stride_kb + (h // k_group).to(tl.int64) * stride_kh
    v_base = V + b.to(tl.int64) * stride_vb + (h // v_group).to(tl.int64) * stride_vh
    return k_base, v_base


# ---------------------------------------------------------------------------------------------
# forward


@triton.jit
def _attn_fwd_inner(acc, l_i, m_i, q, q_pos, q_bkt,
                    k_base, v_base, stride_kt, stride_vt, K_ORDER, K_POS, K_BKT,
                    lo, hi, qk_scale, seqlen, offs_d, d_ok,
                    BLOCK_N: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr,
                    STRICT: tl.constexpr, SAME_BUCKET: tl.constexpr, NOT_SELF: tl.constexpr,
                    PRECISION: tl.constexpr, SANITIZE: tl.constexpr = False):
    """Online softmax over key tiles [lo, hi) of one query block.

    With SANITIZE (masked tiles of inputs holding an inf or NaN) a key's non-finite v reads as
    0 and a row that keeps such a key gets a NaN probability for it instead: 0 * inf never
    reaches the rows that do not keep it, and the rows that do output NaN."""
    for n in range(lo, hi):
        offs_n = n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < seqlen
        k_rows = tl.load(K_ORDER + offs_n, mask=n_ok, other=0)
        kT = tl.load(k_base + k_rows[None, :] * stride_kt + offs_d[:, None], mask=d_ok[:, None], other=0.0)
        qk = tl.dot(q, kT, input_precision=PRECISION) * qk_scale
        if MASK:
            keep = _key_tile_keep(K_POS, K_BKT, offs_n, n_ok, q_pos, q_bkt, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF)
            qk = tl.where(keep, qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            # SCFA's guard: a row with nothing kept so far subtracts 0, not -inf
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        else:
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            m_safe = m_new
        p = tl.math.exp2(qk - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + k_rows[:, None] * stride_vt + offs_d[None, :], mask=d_ok[None, :], other=0.0)
        if SANITIZE:
            v_fin = tl.abs(v) < float("inf")
            v_bad = tl.max(tl.where(v_fin, 0, 1), 1)
            v = tl.where(v_fin, v, 0.0)
            # NaN * 0 = NaN in the product: the row's output (not its lse) ends NaN
            p = tl.where(keep & (v_bad != 0)[None, :], float("nan"), p)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _poisoned(x, POISON):
    """``x`` times the call's poison (NaN where its given ids were out of range, else 1: exact;
    decision_errors.poisoned), or ``x`` where there is none. Folded into the forward's stored lse
    and O: with the lse NaN the backward's probabilities are too, and so every gradient."""
    if POISON is not None:
        x = x * tl.load(POISON)
    return x


@triton.jit
def _fwd_sanitized(q, q_pos, q_bkt, k_base, v_base, stride_kt, stride_vt, k_order, k_posp, k_bktp, nseg, rng,
                   qk_scale, seqlen_k, offs_d, d_ok, LSE, row_base, offs_m, m_ok, o_ptrs, out_ok, POISON,
                   BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr, SINGLE_LOOP: tl.constexpr,
                   CAUSAL: tl.constexpr, STRICT: tl.constexpr, SAME_BUCKET: tl.constexpr, NOT_SELF: tl.constexpr,
                   PRECISION: tl.constexpr):
    """One query block's lse and output again, stored, with the sanitizing loops: what the
    forward's ``SANITIZE`` variant computes for the block (``LOCAL_SANITIZE``)."""
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    prev_hi = 0
    for s in range(nseg):
        lo, f0, f1, hi, prev_hi = _tiles(rng, s, BLOCK_N, SINGLE_LOOP, prev_hi)
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, q_pos, q_bkt, k_base, v_base, stride_kt, stride_vt,
                                        k_order, k_posp, k_bktp, lo, f0, qk_scale, seqlen_k, offs_d, d_ok,
                                        BLOCK_N, True, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF, PRECISION, True)
        if not SINGLE_LOOP:
            acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, q_pos, q_bkt, k_base, v_base, stride_kt, stride_vt,
                                            k_order, k_posp, k_bktp, f0, f1, qk_scale, seqlen_k, offs_d, d_ok,
                                            BLOCK_N, False, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF, PRECISION)
            acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, q_pos, q_bkt, k_base, v_base, stride_kt, stride_vt,
                                            k_order, k_posp, k_bktp, f1, hi, qk_scale, seqlen_k, offs_d, d_ok,
                                            BLOCK_N, True, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF, PRECISION, True)
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    tl.store(LSE + row_base + offs_m, _poisoned(tl.where(empty, float("inf"), m_i + tl.math.log2(l_safe)), POISON),
             mask=m_ok)
    tl.store(o_ptrs, _poisoned(acc / l_safe[:, None], POISON).to(o_ptrs.dtype.element_ty), mask=out_ok)


@triton.jit
def _share_window(NSEG, RANGES, pid_bh, n_blocks, block, seqlen_k, share,
                  BLOCK_N: tl.constexpr, MAX_SEG: tl.constexpr, SPLIT: tl.constexpr, SANITIZE: tl.constexpr):
    """The key tiles [w_lo, w_hi) of a block's share, and how many shares the block has (in a
    ``SANITIZE`` variant one, over every tile).

    The tiles a block visits increase (its segments' ranges do, and a tile is visited once), so
    the key tiles are cut into SPLIT windows of W = cdiv(key tiles, SPLIT) by their index: the
    block's shares are the windows from the one of its first tile to the one of its last, share
    0 the first. A block within one window has one share, unclipped, which runs and stores as an
    unsplit program does."""
    if SANITIZE:
        w_lo, w_hi, shares = 0, 1 << 30, 1
    else:
        nseg = tl.load(NSEG + pid_bh.to(tl.int64) * n_blocks + block)
        rng = RANGES + (pid_bh.to(tl.int64) * n_blocks + block) * (MAX_SEG * 4)
        first = tl.load(rng) // BLOCK_N
        end = tl.cdiv(tl.load(rng + tl.maximum(nseg - 1, 0) * 4 + 3), BLOCK_N)
        w = tl.cdiv(tl.cdiv(seqlen_k, BLOCK_N), SPLIT)
        j0 = first // w
        shares = tl.where((nseg > 0) & (end > first), (end - 1) // w - j0 + 1, 1)
        w_lo = tl.where(shares > 1, (j0 + share) * w, 0)
        w_hi = tl.where(shares > 1, w_lo + w, 1 << 30)
    return w_lo, w_hi, shares


@triton.jit
def _clipped(lo, f0, f1, hi, w_lo, w_hi):
    """A segment's tile loops (:func:`_tiles`) cut to the share's window [w_lo, w_hi)."""
    lo = tl.maximum(lo, w_lo)
    hi = tl.maximum(tl.minimum(hi, w_hi), lo)
    f0 = tl.minimum(tl.maximum(f0, lo), hi)
    f1 = tl.minimum(tl.maximum(f1, f0), hi)
    return lo, f0, f1, hi


@triton.jit
def _split_counters(NONFINITE, FORWARD: tl.constexpr):
    """The split blocks' counters, int32, one per (batch-head, block) of the larger side: they
    follow the call's two non-finite flags in their buffer (``PreparedGroup.flags``,
    ``nonfinite.new_flags``), the forward's flag (``FORWARD``) first, then the backward's."""
    return NONFINITE + (2 if FORWARD else 1)


@triton.jit
def _share_slot(WORK, COUNTERS, pid_bh, n_blocks, block, SIZE: tl.constexpr, SPLIT: tl.constexpr):
    """The block's counter (int32, in COUNTERS: :func:`_split_counters`) and its first share's
    slot in WORK: SPLIT slots a block of SIZE floats (the forward's and dQ's: a BLOCK_M x BLOCK_D
    tile, then two rows; dK/dV's: two BLOCK_N x BLOCK_D tiles)."""
    # the counter's index in int32 (a split launch has at most split_programs blocks), the slot's
    # in int64 (its offset is SPLIT * SIZE times larger)
    counter = COUNTERS + (pid_bh * n_blocks + block)
    return counter, WORK + (pid_bh.to(tl.int64) * n_blocks + block) * (SPLIT * SIZE)


@triton.jit
def _arrived_last(counter, shares):
    """Count this share in at its block's counter, after its stores; whether it is the block's
    last share (which then sets the counter back to zero: the counters are zero before every
    launch, as the build or the op made them, and every launch leaves them so)."""
    tl.debug_barrier()  # every thread's stores before the release below
    last = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu") == shares - 1
    if last:
        tl.store(counter, 0)
    return last


@triton.jit
def _merged_shares(acc, l_i, m_i, WORK, COUNTERS, pid_bh, n_blocks, block, share, shares, offs_d,
                   BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, SPLIT: tl.constexpr):
    """A split forward block's share: stores its unnormalised output, running max and sum to
    its slot (:func:`_share_slot`) and counts itself in (:func:`_arrived_last`). The block's
    last share reads every share's slot in share order and merges them by their maxima (the
    online softmax's step, so the result does not depend on which share came last) and
    returns (True, acc, l, m); every other share returns (False, ...) and stores nothing more."""
    size: tl.constexpr = BLOCK_M * (BLOCK_D + 2)
    counter, first_slot = _share_slot(WORK, COUNTERS, pid_bh, n_blocks, block, size, SPLIT)
    offs_r = tl.arange(0, BLOCK_M)
    tile = offs_r[:, None] * BLOCK_D + offs_d[None, :]
    slot = first_slot + share * size
    tl.store(slot + tile, acc)
    tl.store(slot + BLOCK_M * BLOCK_D + offs_r, m_i)
    tl.store(slot + BLOCK_M * (BLOCK_D + 1) + offs_r, l_i)
    last = _arrived_last(counter, shares)
    if last:
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        for s in range(shares):
            slot = first_slot + s * size
            m_s = tl.load(slot + BLOCK_M * BLOCK_D + offs_r, cache_modifier=".cg")
            l_s = tl.load(slot + BLOCK_M * (BLOCK_D + 1) + offs_r, cache_modifier=".cg")
            m_new = tl.maximum(m_i, m_s)
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            alpha = tl.math.exp2(m_i - m_safe)
            beta = tl.math.exp2(m_s - m_safe)
            l_i = l_i * alpha + l_s * beta
            acc = acc * alpha[:, None] + tl.load(slot + tile, cache_modifier=".cg") * beta[:, None]
            m_i = m_new
    return last, acc, l_i, m_i


@triton.jit
def _summed_shares(x, y, WORK, COUNTERS, pid_bh, n_blocks, block, share, shares, offs_d, ROWS: tl.constexpr,
                   BLOCK_D: tl.constexpr, SPLIT: tl.constexpr, SIZE: tl.constexpr, PAIR: tl.constexpr):
    """A split dQ block's share (``x``; ``y`` not read) or, with PAIR, a split dK/dV block's
    (``x``, ``y``: dK's tile, then dV's, in a slot): stores its partial tiles of ROWS x BLOCK_D
    to its slot of SIZE floats and counts itself in; the block's last share returns (True, the
    shares' sums in share order), every other (False, x, y)."""
    counter, first_slot = _share_slot(WORK, COUNTERS, pid_bh, n_blocks, block, SIZE, SPLIT)
    tile = tl.arange(0, ROWS)[:, None] * BLOCK_D + offs_d[None, :]
    slot = first_slot + share * SIZE
    tl.store(slot + tile, x)
    if PAIR:
        tl.store(slot + ROWS * BLOCK_D + tile, y)
    last = _arrived_last(counter, shares)
    if last:
        x = tl.zeros([ROWS, BLOCK_D], dtype=tl.float32)
        if PAIR:
            y = tl.zeros([ROWS, BLOCK_D], dtype=tl.float32)
        for s in range(shares):
            slot = first_slot + s * SIZE
            x += tl.load(slot + tile, cache_modifier=".cg")
            if PAIR:
                y += tl.load(slot + ROWS * BLOCK_D + tile, cache_modifier=".cg")
    return last, x, y


@triton.jit(do_not_specialize=_RUNTIME)
def _attn_fwd(Q, K, V, O, LSE, WORK,
              Q_ORDER, Q_POS, Q_BKT, K_ORDER, K_POS, K_BKT, RANGES, NSEG, HEAD_MAP, NONFINITE,
              stride_qb, stride_qh, stride_qt,
              stride_kb, stride_kh, stride_kt,
              stride_vb, stride_vh, stride_vt,
              stride_ob, stride_oh, stride_ot,
              n_heads_g, seqlen, seqlen_k, n_blocks, qk_scale, k_group, v_group, POISON,
              HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MAX_SEG: tl.constexpr,
              CAUSAL: tl.constexpr, STRICT: tl.constexpr, SAME_BUCKET: tl.constexpr,
              NOT_SELF: tl.constexpr, PRECISION: tl.constexpr, SINGLE_LOOP: tl.constexpr,
              SANITIZE: tl.constexpr = False, LOCAL_SANITIZE: tl.constexpr = False, HEAVY_FIRST: tl.constexpr = False,
              SPLIT: tl.constexpr = 1):
    """One query block against its key-row ranges. ``LOCAL_SANITIZE`` (``SANITIZE`` off): a
    program whose own output is not finite runs the sanitizing loops itself and stores again,
    in place of the flag and the sanitizing launch (nonfinite.py). ``POISON``: the call's poison,
    folded into the stored lse and O (None: none), after the flag has read the output.

    ``SPLIT`` > 1: the grid holds SPLIT programs a block, each over one window of the key tiles
    (:func:`_share_window`); a block spanning several windows is merged by its last share
    (:func:`_merged_shares`, through WORK), which then stores, flags and sanitizes as an unsplit
    program; a program past its block's shares exits at once. The ``SANITIZE`` variant computes
    every block in its share 0, unsplit. Without SPLIT, WORK is not read (any tensor)."""
    tl.static_assert(BLOCK_D >= 16, "tl.dot needs an inner dimension of at least 16")
    if SANITIZE:
        if tl.load(NONFINITE) == 0:
            return  # the unchanged variant's output is exact (see the module docstring)
    pid_m, pid_bh, b, hg, h, row_base, offs_m, m_ok, q_rows, q_pos, q_bkt, offs_d, d_ok, share = _query_block(
        HEAD_MAP, Q_ORDER, Q_POS, Q_BKT, n_heads_g, seqlen, HEAD_DIM, BLOCK_D, BLOCK_M, SAME_BUCKET, HEAVY_FIRST,
        SPLIT)
    if SPLIT > 1:
        w_lo, w_hi, shares = _share_window(NSEG, RANGES, pid_bh, n_blocks, pid_m, seqlen_k, share, BLOCK_N, MAX_SEG,
                                           SPLIT, SANITIZE)
        if share >= shares:
            return  # the block has fewer shares
    # load q once: it stays in registers for every tile of the block
    q_base = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    q = tl.load(q_base + q_rows[:, None] * stride_qt + offs_d[None, :],
                mask=(q_pos >= 0)[:, None] & d_ok[None, :], other=0.0)
    k_base, v_base = _kv_bases(K, V, b, h, stride_kb, stride_kh, stride_vb, stride_vh, k_group, v_group)
    nseg, rng, k_order, k_posp, k_bktp = _segments(NSEG, RANGES, K_ORDER, K_POS, K_BKT, pid_bh, n_blocks, pid_m,
                                                   seqlen_k, MAX_SEG)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    prev_hi = 0
    for s in range(nseg):
        lo, f0, f1, hi, prev_hi = _tiles(rng, s, BLOCK_N, SINGLE_LOOP, prev_hi)
        if SPLIT > 1:
            lo, f0, f1, hi = _clipped(lo, f0, f1, hi, w_lo, w_hi)
        acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, q_pos, q_bkt, k_base, v_base, stride_kt, stride_vt,
                                        k_order, k_posp, k_bktp, lo, f0, qk_scale, seqlen_k, offs_d, d_ok,
                                        BLOCK_N, True, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF, PRECISION, SANITIZE)
        if not SINGLE_LOOP:
            acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, q_pos, q_bkt, k_base, v_base, stride_kt, stride_vt,
                                            k_order, k_posp, k_bktp, f0, f1, qk_scale, seqlen_k, offs_d, d_ok,
                                            BLOCK_N, False, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF, PRECISION)
            acc, l_i, m_i = _attn_fwd_inner(acc, l_i, m_i, q, q_pos, q_bkt, k_base, v_base, stride_kt, stride_vt,
                                            k_order, k_posp, k_bktp, f1, hi, qk_scale, seqlen_k, offs_d, d_ok,
                                            BLOCK_N, True, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF, PRECISION, SANITIZE)
    if SPLIT > 1:
        if shares > 1:
            last, acc, l_i, m_i = _merged_shares(acc, l_i, m_i, WORK, _split_counters(NONFINITE, True), pid_bh,
                                                 n_blocks, pid_m, share, shares, offs_d, BLOCK_M, BLOCK_D, SPLIT)
            if not last:
                return  # the block's last share stores it

    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    # lse in log2 units; +inf marks a row with no kept key (zero probabilities in backward)
    lse = tl.where(empty, float("inf"), m_i + tl.math.log2(l_safe))
    tl.store(LSE + row_base + offs_m, _poisoned(lse, POISON), mask=m_ok)
    o = acc / l_safe[:, None]
    o_base = O + b.to(tl.int64) * stride_ob + hg.to(tl.int64) * stride_oh
    tl.store(o_base + q_rows[:, None] * stride_ot + offs_d[None, :], _poisoned(o, POISON).to(O.dtype.element_ty),
             mask=m_ok[:, None] & d_ok[None, :])
    if not SANITIZE:
        if LOCAL_SANITIZE:
            # an output with no inf or NaN is exact: only a program whose own is not runs the
            # sanitizing loops, and its stores replace the ones above (same program, same rows).
            # The loops above stay written out: through a shared function the default variants
            # compiled to other registers than the ones timed
            out_ok = m_ok[:, None] & d_ok[None, :]
            if _nonfinite(o, out_ok):
                _fwd_sanitized(q, q_pos, q_bkt, k_base, v_base, stride_kt, stride_vt, k_order, k_posp, k_bktp,
                               nseg, rng, qk_scale, seqlen_k, offs_d, d_ok, LSE, row_base, offs_m, m_ok,
                               o_base + q_rows[:, None] * stride_ot + offs_d[None, :], out_ok, POISON, BLOCK_M, BLOCK_D,
                               BLOCK_N, SINGLE_LOOP, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF, PRECISION)
        else:
            _flag_nonfinite(o, m_ok[:, None] & d_ok[None, :], NONFINITE)


# ---------------------------------------------------------------------------------------------
# backward


@triton.jit
def _rows(base, rows, stride, offs_d, d_ok, SANITIZE: tl.constexpr):
    """Rows ``rows`` of a (T, D) matrix at ``base``; with SANITIZE non-finite values read as 0."""
    x = tl.load(base + rows[:, None] * stride + offs_d[None, :], mask=d_ok[None, :], other=0.0)
    if SANITIZE:
        x = tl.where(tl.abs(x) < float("inf"), x, 0.0)
    return x


@triton.jit
def _attn_bwd_dkdv_inner(dk, dv, k, v, k_pos, k_bkt,
                         q_base, do_base, stride_qt, stride_dot, Q_ORDER, Q_POS, Q_BKT, LSE, DELTA,
                         lo, hi, qk_scale, seqlen, offs_d, d_ok,
                         BLOCK_M: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr,
                         STRICT: tl.constexpr, SAME_BUCKET: tl.constexpr, NOT_SELF: tl.constexpr,
                         PRECISION: tl.constexpr, DP_FIRST: tl.constexpr, SANITIZE: tl.constexpr = False):
    """Accumulate dK, dV of one key block over query tiles [lo, hi); tiles are (keys x queries).

    With SANITIZE (masked tiles of inputs holding an inf or NaN) non-finite q and dO read as 0
    and a query whose delta is not finite (its output or dO is not) gets NaN probabilities on
    the keys it keeps, zeros elsewhere: 0 * inf reaches only the keys a bad row keeps."""
    for m in range(lo, hi):
        offs_m = m * BLOCK_M + tl.arange(0, BLOCK_M)
        m_ok = offs_m < seqlen
        q_rows = tl.load(Q_ORDER + offs_m, mask=m_ok, other=0)
        qT = tl.load(q_base + q_rows[None, :] * stride_qt + offs_d[:, None], mask=d_ok[:, None], other=0.0)
        lse = tl.load(LSE + offs_m, mask=m_ok, other=float("inf"))
        qkT = tl.dot(k, qT, input_precision=PRECISION) * qk_scale
        if DP_FIRST:
            # dP's product runs on the tensor cores while the exponentials below run
            do = _rows(do_base, q_rows, stride_dot, offs_d, d_ok, SANITIZE)
            dpT = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        pT = tl.math.exp2(qkT - lse[None, :])
        if MASK:
            q_pos = tl.load(Q_POS + offs_m, mask=m_ok, other=-1)
            q_bkt = q_pos
            if SAME_BUCKET:
                q_bkt = tl.load(Q_BKT + offs_m, mask=m_ok, other=-1)
            keep = _tile_keep(q_pos[None, :], k_pos[:, None], q_bkt[None, :], k_bkt[:, None],
                              CAUSAL, STRICT, SAME_BUCKET, NOT_SELF)
            if SANITIZE:
                di = tl.load(DELTA + offs_m, mask=m_ok, other=0.0)
                row_bad = ~(tl.abs(di) < float("inf"))
                di = tl.where(row_bad, 0.0, di)
                pT = tl.where(row_bad[None, :], float("nan"), pT)
                qT = tl.where(tl.abs(qT) < float("inf"), qT, 0.0)
            pT = tl.where(keep, pT, 0.0)
        if not DP_FIRST:
            do = _rows(do_base, q_rows, stride_dot, offs_d, d_ok, SANITIZE)
        dv += tl.dot(pT.to(do.dtype), do, input_precision=PRECISION)
        if not SANITIZE:
            di = tl.load(DELTA + offs_m, mask=m_ok, other=0.0)
        if not DP_FIRST:
            dpT = tl.dot(v, tl.trans(do), input_precision=PRECISION)
        dsT = pT * (dpT - di[None, :])
        dk += tl.dot(dsT.to(qT.dtype), tl.trans(qT), input_precision=PRECISION)
    return dk, dv


@triton.jit(do_not_specialize=_RUNTIME)
def _attn_bwd_dkdv(Q, K, V, DO, DK, DV, LSE, DELTA, WORK,
                   Q_ORDER, Q_POS, Q_BKT, K_ORDER, K_POS, K_BKT, RANGES, NSEG, HEAD_MAP, NONFINITE,
                   stride_qb, stride_qh, stride_qt,
                   stride_kb, stride_kh, stride_kt,
                   stride_vb, stride_vh, stride_vt,
                   stride_dob, stride_doh, stride_dot,
                   stride_dkb, stride_dkh, stride_dkt,
                   stride_dvb, stride_dvh, stride_dvt,
                   n_heads_g, seqlen, seqlen_k, n_blocks, qk_scale, sm_scale, k_group, v_group,
                   DKV_PER_QUERY_HEAD: tl.constexpr,
                   HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MAX_SEG: tl.constexpr,
                   CAUSAL: tl.constexpr, STRICT: tl.constexpr, SAME_BUCKET: tl.constexpr,
                   NOT_SELF: tl.constexpr, PRECISION: tl.constexpr, SINGLE_LOOP: tl.constexpr,
                   DP_FIRST: tl.constexpr, SANITIZE: tl.constexpr = False,
                   HEAVY_FIRST: tl.constexpr = False, SPLIT: tl.constexpr = 1):
    """One key block (BLOCK_N rows of the key layout) against its query-row ranges.

    ``SPLIT`` > 1: split as the forward (:func:`_attn_fwd`), each share over one window of the
    query tiles; a block of several shares is summed by its last share (:func:`_summed_shares`),
    which then checks the flag, stores and flags dK and dV as an unsplit program."""
    tl.static_assert(BLOCK_D >= HEAD_DIM, "BLOCK_D pads the head dim to a power of two")
    if SANITIZE:
        if tl.load(NONFINITE) == 0:
            return  # the unchanged variants' outputs are exact (see the module docstring)
    pid_n, pid_bh, b, hg, h, row_base, share = _program(HEAD_MAP, n_heads_g, seqlen, HEAVY_FIRST, False, SPLIT)
    if SPLIT > 1:
        w_lo, w_hi, shares = _share_window(NSEG, RANGES, pid_bh, n_blocks, pid_n, seqlen, share, BLOCK_M, MAX_SEG,
                                           SPLIT, SANITIZE)
        if share >= shares:
            return  # the block has fewer shares
    row_base_k = pid_bh.to(tl.int64) * seqlen_k  # key rows: Tk of them (queries: Tq = seqlen)
    offs_n, n_ok, k_rows, k_pos, k_bkt = _layout_rows(K_ORDER, K_POS, K_BKT, row_base_k, pid_n, seqlen_k,
                                                      KEY_SENTINEL, -2, BLOCK_N, SAME_BUCKET)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    kv_ok = (k_pos != KEY_SENTINEL)[:, None] & d_ok[None, :]
    k = tl.load(K + b.to(tl.int64) * stride_kb + (h // k_group).to(tl.int64) * stride_kh
                + k_rows[:, None] * stride_kt + offs_d[None, :], mask=kv_ok, other=0.0)
    v = tl.load(V + b.to(tl.int64) * stride_vb + (h // v_group).to(tl.int64) * stride_vh
                + k_rows[:, None] * stride_vt + offs_d[None, :], mask=kv_ok, other=0.0)
    if SANITIZE:
        # a non-finite v row reads as 0: the keys' dP stay finite (a row keeping the key has a
        # non-finite output, hence delta, and poisons the key's gradients in the tiles)
        v = tl.where(tl.abs(v) < float("inf"), v, 0.0)
    q_base = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    do_base = DO + b.to(tl.int64) * stride_dob + hg.to(tl.int64) * stride_doh

    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    nseg, rng, q_order, q_posp, q_bktp = _segments(NSEG, RANGES, Q_ORDER, Q_POS, Q_BKT, pid_bh, n_blocks, pid_n,
                                                   seqlen, MAX_SEG)
    lsep = LSE + row_base
    deltap = DELTA + row_base
    prev_hi = 0
    for s in range(nseg):
        lo, f0, f1, hi, prev_hi = _tiles(rng, s, BLOCK_M, SINGLE_LOOP, prev_hi)
        if SPLIT > 1:
            lo, f0, f1, hi = _clipped(lo, f0, f1, hi, w_lo, w_hi)
        dk, dv = _attn_bwd_dkdv_inner(dk, dv, k, v, k_pos, k_bkt, q_base, do_base, stride_qt, stride_dot,
                                      q_order, q_posp, q_bktp, lsep, deltap, lo, f0, qk_scale, seqlen,
                                      offs_d, d_ok, BLOCK_M, True, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF,
                                      PRECISION, DP_FIRST, SANITIZE)
        if not SINGLE_LOOP:
            dk, dv = _attn_bwd_dkdv_inner(dk, dv, k, v, k_pos, k_bkt, q_base, do_base, stride_qt, stride_dot,
                                          q_order, q_posp, q_bktp, lsep, deltap, f0, f1, qk_scale, seqlen,
                                          offs_d, d_ok, BLOCK_M, False, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF,
                                          PRECISION, DP_FIRST)
            dk, dv = _attn_bwd_dkdv_inner(dk, dv, k, v, k_pos, k_bkt, q_base, do_base, stride_qt, stride_dot,
                                          q_order, q_posp, q_bktp, lsep, deltap, f1, hi, qk_scale, seqlen,
                                          offs_d, d_ok, BLOCK_M, True, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF,
                                          PRECISION, DP_FIRST, SANITIZE)
    if SPLIT > 1:
        if shares > 1:
            last, dk, dv = _summed_shares(dk, dv, WORK, _split_counters(NONFINITE, False), pid_bh, n_blocks, pid_n,
                                          share, shares, offs_d, BLOCK_N, BLOCK_D, SPLIT, 2 * BLOCK_N * BLOCK_D, True)
            if not last:
                return  # the block's last share stores them

    if not SANITIZE:
        # the dQ kernel found a value that is not finite: the sanitizing variant writes this
        # call's dK, dV (checked here, not first: an early exit made the fp32 D=256 variant's
        # loops spill more)
        if tl.load(NONFINITE) != 0:
            return
    # dK, dV go to original rows: of this query head's buffer, or straight into the kv head,
    # which is h (written in place only with one query head per kv head: op.py's ``direct``)
    if DKV_PER_QUERY_HEAD:
        dkv_head = hg
    else:
        dkv_head = h
    out_mask = n_ok[:, None] & d_ok[None, :]
    if not SANITIZE:
        _flag_nonfinite(dk + dv, out_mask, NONFINITE)
    dk_ptrs = DK + b.to(tl.int64) * stride_dkb + dkv_head.to(tl.int64) * stride_dkh + k_rows[:, None] * stride_dkt
    tl.store(dk_ptrs + offs_d[None, :], (dk * sm_scale).to(DK.dtype.element_ty), mask=out_mask)
    dv_ptrs = DV + b.to(tl.int64) * stride_dvb + dkv_head.to(tl.int64) * stride_dvh + k_rows[:, None] * stride_dvt
    tl.store(dv_ptrs + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=out_mask)


@triton.jit
def _attn_bwd_dq_inner(dq, q, do, lse, di, q_pos, q_bkt,
                       k_base, v_base, stride_kt, stride_vt, K_ORDER, K_POS, K_BKT,
                       lo, hi, qk_scale, seqlen, offs_d, d_ok,
                       BLOCK_N: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr,
                       STRICT: tl.constexpr, SAME_BUCKET: tl.constexpr, NOT_SELF: tl.constexpr,
                       PRECISION: tl.constexpr, SANITIZE: tl.constexpr = False):
    """Accumulate dQ of one query block over key tiles [lo, hi).

    With SANITIZE (masked tiles of inputs holding an inf or NaN) non-finite k and v read as 0
    in dP and in the dQ product, after the scores: a row keeping a non-finite key still has a
    non-finite lse or delta from the forward pass, so its dQ ends non-finite, and no other's."""
    for n in range(lo, hi):
        offs_n = n * BLOCK_N + tl.arange(0, BLOCK_N)
        n_ok = offs_n < seqlen
        k_rows = tl.load(K_ORDER + offs_n, mask=n_ok, other=0)
        kT = tl.load(k_base + k_rows[None, :] * stride_kt + offs_d[:, None], mask=d_ok[:, None], other=0.0)
        vT = tl.load(v_base + k_rows[None, :] * stride_vt + offs_d[:, None], mask=d_ok[:, None], other=0.0)
        qk = tl.dot(q, kT, input_precision=PRECISION) * qk_scale
        p = tl.math.exp2(qk - lse[:, None])
        if MASK:
            keep = _key_tile_keep(K_POS, K_BKT, offs_n, n_ok, q_pos, q_bkt, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF)
            p = tl.where(keep, p, 0.0)
            if SANITIZE:
                kT = tl.where(tl.abs(kT) < float("inf"), kT, 0.0)
                vT = tl.where(tl.abs(vT) < float("inf"), vT, 0.0)
        dp = tl.dot(do, vT, input_precision=PRECISION)
        ds = p * (dp - di[:, None])
        dq += tl.dot(ds.to(kT.dtype), tl.trans(kT), input_precision=PRECISION)
    return dq


@triton.jit(do_not_specialize=_RUNTIME)
def _attn_bwd_dq(Q, K, V, O, DO, DQ, LSE, DELTA, WORK,
                 Q_ORDER, Q_POS, Q_BKT, K_ORDER, K_POS, K_BKT, RANGES, NSEG, HEAD_MAP, NONFINITE,
                 stride_qb, stride_qh, stride_qt,
                 stride_kb, stride_kh, stride_kt,
                 stride_vb, stride_vh, stride_vt,
                 stride_ob, stride_oh, stride_ot,
                 stride_dob, stride_doh, stride_dot,
                 stride_dqb, stride_dqh, stride_dqt,
                 n_heads_g, seqlen, seqlen_k, n_blocks, qk_scale, sm_scale, k_group, v_group,
                 HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, MAX_SEG: tl.constexpr,
                 CAUSAL: tl.constexpr, STRICT: tl.constexpr, SAME_BUCKET: tl.constexpr,
                 NOT_SELF: tl.constexpr, PRECISION: tl.constexpr, SINGLE_LOOP: tl.constexpr,
                 SANITIZE: tl.constexpr = False, STORE_DELTA: tl.constexpr = True, HEAVY_FIRST: tl.constexpr = False,
                 SPLIT: tl.constexpr = 1):
    """One query block against its key-row ranges (the forward pass's ranges). It also
    computes FlashAttention-2's delta = rowsum(dO * O) of its rows and stores it for the dK/dV
    kernel, which runs after it (not ``STORE_DELTA``: in :func:`_attn_bwd_sanitize`, beside
    the dK/dV programs that read the delta the unchanged variant stored).

    ``SPLIT`` > 1: split as the forward (:func:`_attn_fwd`), each share over one window of the
    key tiles; a block of several shares is summed by its last share (:func:`_summed_shares`),
    which stores and flags dQ; every share stores the same delta."""
    if SANITIZE:
        if tl.load(NONFINITE) == 0:
            return  # the unchanged variant's output is exact (see the module docstring)
    pid_m, pid_bh, b, hg, h, row_base, offs_m, m_ok, q_rows, q_pos, q_bkt, offs_d, d_ok, share = _query_block(
        HEAD_MAP, Q_ORDER, Q_POS, Q_BKT, n_heads_g, seqlen, HEAD_DIM, BLOCK_D, BLOCK_M, SAME_BUCKET, HEAVY_FIRST,
        SPLIT)
    if SPLIT > 1:
        w_lo, w_hi, shares = _share_window(NSEG, RANGES, pid_bh, n_blocks, pid_m, seqlen_k, share, BLOCK_N, MAX_SEG,
                                           SPLIT, SANITIZE)
        if share >= shares:
            return  # the block has fewer shares
    row_ok = (q_pos >= 0)[:, None] & d_ok[None, :]
    q = tl.load(Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
                + q_rows[:, None] * stride_qt + offs_d[None, :], mask=row_ok, other=0.0)
    do = tl.load(DO + b.to(tl.int64) * stride_dob + hg.to(tl.int64) * stride_doh
                 + q_rows[:, None] * stride_dot + offs_d[None, :], mask=row_ok, other=0.0)
    lse = tl.load(LSE + row_base + offs_m, mask=m_ok, other=float("inf"))
    o = tl.load(O + b.to(tl.int64) * stride_ob + hg.to(tl.int64) * stride_oh
                + q_rows[:, None] * stride_ot + offs_d[None, :], mask=row_ok, other=0.0)
    di = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)  # dropped rows: 0 (their O is 0)
    if STORE_DELTA:
        tl.store(DELTA + row_base + offs_m, di, mask=m_ok)
    k_base, v_base = _kv_bases(K, V, b, h, stride_kb, stride_kh, stride_vb, stride_vh, k_group, v_group)
    nseg, rng, k_order, k_posp, k_bktp = _segments(NSEG, RANGES, K_ORDER, K_POS, K_BKT, pid_bh, n_blocks, pid_m,
                                                   seqlen_k, MAX_SEG)

    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    prev_hi = 0
    for s in range(nseg):
        lo, f0, f1, hi, prev_hi = _tiles(rng, s, BLOCK_N, SINGLE_LOOP, prev_hi)
        if SPLIT > 1:
            lo, f0, f1, hi = _clipped(lo, f0, f1, hi, w_lo, w_hi)
        dq = _attn_bwd_dq_inner(dq, q, do, lse, di, q_pos, q_bkt, k_base, v_base, stride_kt, stride_vt,
                                k_order, k_posp, k_bktp, lo, f0, qk_scale, seqlen_k, offs_d, d_ok,
                                BLOCK_N, True, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF, PRECISION, SANITIZE)
        if not SINGLE_LOOP:
            dq = _attn_bwd_dq_inner(dq, q, do, lse, di, q_pos, q_bkt, k_base, v_base, stride_kt, stride_vt,
                                    k_order, k_posp, k_bktp, f0, f1, qk_scale, seqlen_k, offs_d, d_ok,
                                    BLOCK_N, False, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF, PRECISION)
            dq = _attn_bwd_dq_inner(dq, q, do, lse, di, q_pos, q_bkt, k_base, v_base, stride_kt, stride_vt,
                                    k_order, k_posp, k_bktp, f1, hi, qk_scale, seqlen_k, offs_d, d_ok,
                                    BLOCK_N, True, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF, PRECISION, SANITIZE)
    if SPLIT > 1:
        if shares > 1:
            # a slot as the forward's (kernels._share_slot, op.Launches._work)
            last, dq, _ = _summed_shares(dq, dq, WORK, _split_counters(NONFINITE, False), pid_bh, n_blocks, pid_m,
                                         share, shares, offs_d, BLOCK_M, BLOCK_D, SPLIT, BLOCK_M * (BLOCK_D + 2), False)
            if not last:
                return  # the block's last share stores it

    dq_base = DQ + b.to(tl.int64) * stride_dqb + h.to(tl.int64) * stride_dqh
    tl.store(dq_base + q_rows[:, None] * stride_dqt + offs_d[None, :], (dq * sm_scale).to(DQ.dtype.element_ty),
             mask=m_ok[:, None] & d_ok[None, :])
    if not SANITIZE:
        _flag_nonfinite(dq, m_ok[:, None] & d_ok[None, :], NONFINITE)


@triton.jit(do_not_specialize=["seqlen", "seqlen_k", "n_qb", "n_kb", "n_heads_g", "k_group", "v_group"])
def _attn_bwd_sanitize(Q, K, V, O, DO, DQ, DK, DV, LSE, DELTA,
                       Q_ORDER, Q_POS, Q_BKT, K_ORDER, K_POS, K_BKT, Q_RANGES, Q_NSEG, K_RANGES, K_NSEG, HEAD_MAP,
                       NONFINITE,
                       stride_qb, stride_qh, stride_qt,
                       stride_kb, stride_kh, stride_kt,
                       stride_vb, stride_vh, stride_vt,
                       stride_ob, stride_oh, stride_ot,
                       stride_dob, stride_doh, stride_dot,
                       stride_dqb, stride_dqh, stride_dqt,
                       stride_dkb, stride_dkh, stride_dkt,
                       stride_dvb, stride_dvh, stride_dvt,
                       n_heads_g, seqlen, seqlen_k, n_qb, n_kb, qk_scale, sm_scale, k_group, v_group,
                       HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr,
                       DQ_M: tl.constexpr, DQ_N: tl.constexpr, MAX_SEG_Q: tl.constexpr,
                       DKDV_M: tl.constexpr, DKDV_N: tl.constexpr, MAX_SEG_K: tl.constexpr,
                       DKV_PER_QUERY_HEAD: tl.constexpr, DP_FIRST: tl.constexpr,
                       CAUSAL: tl.constexpr, STRICT: tl.constexpr, SAME_BUCKET: tl.constexpr,
                       NOT_SELF: tl.constexpr, PRECISION: tl.constexpr, SINGLE_LOOP: tl.constexpr,
                       HEAVY_FIRST: tl.constexpr = False):
    """The backward's two sanitizing variants in one launch (``nonfinite.merged_sanitize``),
    after both unchanged ones: programs (i, bh, 0) run dQ's of query block i, programs
    (i, bh, 1) dK/dV's of key block i, in the grid's own order (``HEAVY_FIRST``, given with the
    other kernels' flags, is not taken: this grid's blocks are the longer side's). They exit at
    once unless the backward's flag is set; the dQ programs then leave the delta as the
    unchanged dQ variant stored it, which the dK/dV programs read beside them."""
    if tl.load(NONFINITE) == 0:
        return
    if tl.program_id(2) == 0:
        if tl.program_id(0) < n_qb:
            _attn_bwd_dq(Q, K, V, O, DO, DQ, LSE, DELTA, LSE,  # no workspace: unsplit
                         Q_ORDER, Q_POS, Q_BKT, K_ORDER, K_POS, K_BKT, Q_RANGES, Q_NSEG, HEAD_MAP, NONFINITE,
                         stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt,
                         stride_vb, stride_vh, stride_vt, stride_ob, stride_oh, stride_ot,
                         stride_dob, stride_doh, stride_dot, stride_dqb, stride_dqh, stride_dqt,
                         n_heads_g, seqlen, seqlen_k, n_qb, qk_scale, sm_scale, k_group, v_group,
                         HEAD_DIM, BLOCK_D, DQ_M, DQ_N, MAX_SEG_Q, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF,
                         PRECISION, SINGLE_LOOP, True, False)
    else:
        if tl.program_id(0) < n_kb:
            _attn_bwd_dkdv(Q, K, V, DO, DK, DV, LSE, DELTA, LSE,  # no workspace: unsplit
                           Q_ORDER, Q_POS, Q_BKT, K_ORDER, K_POS, K_BKT, K_RANGES, K_NSEG, HEAD_MAP, NONFINITE,
                           stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt,
                           stride_vb, stride_vh, stride_vt, stride_dob, stride_doh, stride_dot,
                           stride_dkb, stride_dkh, stride_dkt, stride_dvb, stride_dvh, stride_dvt,
                           n_heads_g, seqlen, seqlen_k, n_kb, qk_scale, sm_scale, k_group, v_group,
                           DKV_PER_QUERY_HEAD, HEAD_DIM, BLOCK_D, DKDV_M, DKDV_N, MAX_SEG_K, CAUSAL, STRICT,
                           SAME_BUCKET, NOT_SELF, PRECISION, SINGLE_LOOP, DP_FIRST, True)
