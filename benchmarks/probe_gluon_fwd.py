"""Probe: the forward tile loop written in Gluon (Triton's lower-level language) on Hopper.

The Triton forward kernel runs one warpgroup's products and softmax one after the other, and
Triton 3.6 splits a loop into producer and consumer warps only over loads through tensor
descriptors, which the gathered K and V rows are not (docs/kernels.md). Gluon exposes what that
needs by hand: ``warpgroup_mma`` issued asynchronously and waited where the program says, and
``cp.async`` gathers into a ring of shared-memory stages. This probe asks one question before any
of it is built into the backend: over the same tiles, does such a loop beat the Triton forward?

The kernel computes what ``kernels._attn_fwd`` computes for a causal pattern without a bucket
predicate (QKDrop, Dense): the same index build (``attn.prepare``), query block and key
ranges, output and lse. Two loop shapes:

- ``OVERLAP=False``: per key tile, S = Q K^T, softmax, O += P V, each product waited at once;
  K and V of the next ``STAGES - 1`` tiles are in flight meanwhile (``cp.async``).
- ``OVERLAP=True`` (FlashAttention-3's ordering within a warpgroup): the next tile's S = Q K^T
  is issued before this tile's softmax, and this tile's P V is left running while the loop
  moves on; each product is waited for only where its result is read.

And a warp-specialized kernel (variants ``ws:BLOCK_N:STAGES:COMPUTE_REGS[:OVERLAP[:PINGPONG]]``):
a producer partition at few registers gathers K and V into the stages and hands each to two
consumer warpgroups through mbarriers, so that the consumers never meet at a block barrier
(``PINGPONG`` orders their products one after the other, as FlashAttention-3 does). The producer
gathers a 128-key tile in 32-row copies: one copy of all its rows spilled (run 130). The backend's
forward at D=128 is this kernel with 128-key tiles (tilesparse/backends/triton/gluon_fwd.py).

Compile for sm_90 without a GPU (registers, spills, shared memory):

    python benchmarks/probe_gluon_fwd.py --compile

On a GPU, against the Triton forward on the same prepared group (outputs compared) and cuDNN,
each timed back to back (``fwd_ms``) and synchronized after every call (``fwd_sync_ms``):

    python3 benchmarks/probe_gluon_fwd.py --out DIR [--shapes 1,32,8,128,16384] [--patterns keep0.7]

Gluon kernels run compiled only (not under ``TRITON_INTERPRET=1``). Written for Triton 3.6: the
kernels without warp specialization call ``gl.thread_barrier``, which 3.7 no longer has. What runs 105, 106
and 116 measured, and why the backend does not use it: docs/kernels.md, "The forward written in Gluon" and "The
forward with warp specialization".
"""

from __future__ import annotations

import functools
import itertools
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    async_copy,
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_init,
    warpgroup_mma_wait,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from bench_models import probe_args  # noqa: E402

from tilesparse.backends.triton.op import LOG2E  # noqa: E402
from tilesparse.backends.triton.sm90 import _divisible, _signature, report  # noqa: E402


@gluon.jit
def _issue_kv(k_buf, v_buf, t, hi, k_order, offs_r, seqlen_k, k_base, v_base, stride_kt, stride_vt, offs_d,
              BLOCK_N: gl.constexpr):
    """Gather key tile ``t``'s K and V rows into one stage, one commit group (zero-filled past
    the range's end ``hi`` and past Tk)."""
    offs_n = t * BLOCK_N + offs_r
    ok = (offs_n < seqlen_k) & (t < hi)
    rows = gl.load(k_order + offs_n, mask=ok, other=0)
    r = rows.to(gl.int64)[:, None]
    mask = ok[:, None]
    async_copy.async_copy_global_to_shared(k_buf, k_base + r * stride_kt + offs_d[None, :], mask=mask)
    async_copy.async_copy_global_to_shared(v_buf, v_base + r * stride_vt + offs_d[None, :], mask=mask)
    async_copy.commit_group()


@gluon.jit
def _softmax_tile(s, m_i, l_i, q_pos, k_posp, n, f0, f1, seqlen_k, qk_scale,
                  BLOCK_N: gl.constexpr, s_layout: gl.constexpr):
    """Scale and (on masked tiles: outside [f0, f1)) mask a tile of scores; the online-softmax
    step: p, the row rescale alpha, and the new m_i, l_i."""
    qk = s * qk_scale
    if (n < f0) | (n >= f1):
        offs_n = n * BLOCK_N + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
        k_pos = gl.load(k_posp + offs_n, mask=offs_n < seqlen_k, other=1 << 30)
        keep = k_pos[None, :] <= q_pos[:, None]
        qk = gl.where(keep, qk, float("-inf"))
    m_new = gl.maximum(m_i, gl.max(qk, 1))
    m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
    p = gl.exp2(qk - m_safe[:, None])
    alpha = gl.exp2(m_i - m_safe)
    l_i = l_i * alpha + gl.sum(p, 1)
    return p, alpha, m_new, l_i


@gluon.jit
def _gl_fwd(Q, K, V, O, LSE, Q_ORDER, Q_POS, K_ORDER, K_POS, RANGES, NSEG, HEAD_MAP,
            stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt,
            stride_vb, stride_vh, stride_vt, stride_ob, stride_oh, stride_ot,
            n_heads_g, seqlen, seqlen_k, n_blocks, qk_scale, k_group, v_group,
            HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, MAX_SEG: gl.constexpr,
            STAGES: gl.constexpr, OVERLAP: gl.constexpr, num_warps: gl.constexpr):
    gl.static_assert(not OVERLAP or STAGES >= 4, "the overlapped loop reads three stages and fills a fourth")
    # layouts: the products' accumulators split the 128 query rows over the warps (16 rows a
    # warp, each warpgroup 64), loads 16 bytes a thread along D
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                        instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[num_warps, 1],
                                                        instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    TPW_D: gl.constexpr = HEAD_DIM // 8
    ld_layout: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [num_warps, 1], [1, 0])
    sm_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    rows_l: gl.constexpr = gl.SliceLayout(1, ld_layout)
    dtype: gl.constexpr = Q.dtype.element_ty

    pid_m = gl.program_id(0)
    pid_bh = gl.program_id(1)
    b = pid_bh // n_heads_g
    hg = pid_bh % n_heads_g
    h = gl.load(HEAD_MAP + hg)
    row_base = pid_bh.to(gl.int64) * seqlen

    q_smem = gl.allocate_shared_memory(dtype, [BLOCK_M, HEAD_DIM], sm_layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], sm_layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], sm_layout)

    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, ld_layout))
    offs_mq = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=rows_l)
    mq_ok = offs_mq < seqlen
    q_rows = gl.load(Q_ORDER + row_base + offs_mq, mask=mq_ok, other=0)
    q_pos_ld = gl.load(Q_POS + row_base + offs_mq, mask=mq_ok, other=-1)
    q_base = Q + b.to(gl.int64) * stride_qb + h.to(gl.int64) * stride_qh
    q_mask = (q_pos_ld >= 0)[:, None]
    async_copy.async_copy_global_to_shared(q_smem, q_base + q_rows.to(gl.int64)[:, None] * stride_qt + offs_d[None, :],
                                           mask=q_mask)
    async_copy.commit_group()

    offs_ms = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, s_layout))
    q_pos = gl.load(Q_POS + row_base + offs_ms, mask=offs_ms < seqlen, other=-1)
    k_base = K + b.to(gl.int64) * stride_kb + (h // k_group).to(gl.int64) * stride_kh
    v_base = V + b.to(gl.int64) * stride_vb + (h // v_group).to(gl.int64) * stride_vh
    nseg = gl.load(NSEG + pid_bh.to(gl.int64) * n_blocks + pid_m)
    rng = RANGES + (pid_bh.to(gl.int64) * n_blocks + pid_m) * (MAX_SEG * 4)
    k_order = K_ORDER + pid_bh.to(gl.int64) * seqlen_k
    k_posp = K_POS + pid_bh.to(gl.int64) * seqlen_k

    m_i = gl.full([BLOCK_M], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([BLOCK_M], gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([BLOCK_M, HEAD_DIM], gl.float32, layout=o_layout)
    if OVERLAP:
        acc = warpgroup_mma_init(acc)  # the loops carry it as a product in flight
    s_zero = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, layout=s_layout)
    offs_r = gl.arange(0, BLOCK_N, layout=rows_l)

    for s in range(nseg):
        # the previous segment's end, read back (Triton 3.6 folds a carried scalar: kernels._tiles)
        prev_hi = gl.cdiv(gl.load(rng + s * 4 - 1, mask=s > 0, other=0), BLOCK_N)
        lo = gl.maximum(gl.load(rng + s * 4) // BLOCK_N, prev_hi)
        hi = gl.maximum(gl.cdiv(gl.load(rng + s * 4 + 3), BLOCK_N), lo)
        f0 = gl.minimum(gl.maximum(gl.cdiv(gl.load(rng + s * 4 + 1), BLOCK_N), lo), hi)
        f1 = gl.minimum(gl.maximum(gl.load(rng + s * 4 + 2) // BLOCK_N, f0), hi)
        # prologue: the first tiles in flight (STAGES - 1; STAGES - 2 when overlapped)
        for i in gl.static_range(STAGES - 1 - OVERLAP):
            _issue_kv(k_smem.index(i), v_smem.index(i), lo + i, hi, k_order, offs_r, seqlen_k, k_base, v_base,
                      stride_kt, stride_vt, offs_d, BLOCK_N)
        if OVERLAP:
            # S of the first tile, issued ahead
            async_copy.wait_group(STAGES - 3)
            gl.thread_barrier()
            fence_async_shared()
            s_next = warpgroup_mma(q_smem, k_smem.index(0).permute((1, 0)), s_zero, use_acc=False, is_async=True)
        for n in range(lo, hi):
            j = n - lo
            stage = j % STAGES
            if OVERLAP:
                # products complete in issue order: S of tile n was issued before P V of tile n - 1
                if j == 0:
                    s_cur = warpgroup_mma_wait(0, deps=(s_next,))  # nothing else in flight yet
                else:
                    s_cur = warpgroup_mma_wait(1, deps=(s_next,))
                # tiles up to n + STAGES - 3 were issued: tile n + 1's group is STAGES - 4 from the newest
                async_copy.wait_group(STAGES - 4)
                # one barrier a tile: every thread's copies of tile n + 1 are in, and every warpgroup
                # is done with tile n - 2 (its P V was waited for in the last iteration)
                gl.thread_barrier()
                fence_async_shared()
                s_next = warpgroup_mma(q_smem, k_smem.index((j + 1) % STAGES).permute((1, 0)), s_zero, use_acc=False,
                                       is_async=True)
                # refill tile n - 2's stage while the products run (its index load waits here)
                refill = (j + STAGES - 2) % STAGES
                _issue_kv(k_smem.index(refill), v_smem.index(refill), n + STAGES - 2, hi, k_order, offs_r, seqlen_k,
                          k_base, v_base, stride_kt, stride_vt, offs_d, BLOCK_N)
                p, alpha, m_i, l_i = _softmax_tile(s_cur, m_i, l_i, q_pos, k_posp, n, f0, f1, seqlen_k, qk_scale,
                                                   BLOCK_N, s_layout)
                p = gl.convert_layout(p.to(dtype), p_layout)
                acc = warpgroup_mma_wait(1, deps=(acc,))  # P V of tile n - 1 (S of n + 1 may still run)
                acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
                acc = warpgroup_mma(p, v_smem.index(stage), acc, is_async=True)
            else:
                # tiles up to n + STAGES - 2 were issued: tile n's group is STAGES - 2 from the newest
                async_copy.wait_group(STAGES - 2)
                # one barrier a tile: every thread's copies of tile n are in, and every warpgroup is
                # done with tile n - 1 (its products were waited for)
                gl.thread_barrier()
                fence_async_shared()
                s_tok = warpgroup_mma(q_smem, k_smem.index(stage).permute((1, 0)), s_zero, use_acc=False,
                                      is_async=True)
                # refill tile n - 1's stage while S runs (its index load waits here)
                refill = (j + STAGES - 1) % STAGES
                _issue_kv(k_smem.index(refill), v_smem.index(refill), n + STAGES - 1, hi, k_order, offs_r, seqlen_k,
                          k_base, v_base, stride_kt, stride_vt, offs_d, BLOCK_N)
                s_cur = warpgroup_mma_wait(0, deps=(s_tok,))
                p, alpha, m_i, l_i = _softmax_tile(s_cur, m_i, l_i, q_pos, k_posp, n, f0, f1, seqlen_k, qk_scale,
                                                   BLOCK_N, s_layout)
                p = gl.convert_layout(p.to(dtype), p_layout)
                acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
                acc = warpgroup_mma(p, v_smem.index(stage), acc, is_async=True)
                acc = warpgroup_mma_wait(0, deps=(acc,))
        if OVERLAP:
            s_next = warpgroup_mma_wait(0, deps=(s_next,))
        async_copy.wait_group(0)
        gl.thread_barrier()

    if OVERLAP:
        acc = warpgroup_mma_wait(0, deps=(acc,))
    empty = l_i == 0.0
    l_safe = gl.where(empty, 1.0, l_i)
    lse = gl.where(empty, float("inf"), m_i + gl.log2(l_safe))
    gl.store(LSE + row_base + offs_ms, lse, mask=offs_ms < seqlen)
    o = acc / gl.convert_layout(l_safe, gl.SliceLayout(1, o_layout))[:, None]
    offs_mo = pid_m * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, o_layout))
    offs_do = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    mo_ok = offs_mo < seqlen
    o_rows = gl.load(Q_ORDER + row_base + offs_mo, mask=mo_ok, other=0)
    o_base = O + b.to(gl.int64) * stride_ob + hg.to(gl.int64) * stride_oh
    gl.store(o_base + o_rows.to(gl.int64)[:, None] * stride_ot + offs_do[None, :], o.to(dtype),
             mask=mo_ok[:, None] & (offs_do[None, :] >= 0))


# 12 warps at 168 registers fill an SM's 64K: the producer warpgroup gives its share to the consumers
WS_MAXNREG = 168


@gluon.jit
def _segment_tiles(rng, s, BLOCK_N: gl.constexpr):
    """Segment ``s``'s key tiles: [lo, hi), full in [f0, f1), the rest masked (as ``kernels._tiles``)."""
    # the previous segment's end, read back (Triton 3.6 folds a carried scalar: kernels._tiles)
    prev_hi = gl.cdiv(gl.load(rng + s * 4 - 1, mask=s > 0, other=0), BLOCK_N)
    lo = gl.maximum(gl.load(rng + s * 4) // BLOCK_N, prev_hi)
    hi = gl.maximum(gl.cdiv(gl.load(rng + s * 4 + 3), BLOCK_N), lo)
    f0 = gl.minimum(gl.maximum(gl.cdiv(gl.load(rng + s * 4 + 1), BLOCK_N), lo), hi)
    f1 = gl.minimum(gl.maximum(gl.load(rng + s * 4 + 2) // BLOCK_N, f0), hi)
    return lo, hi, f0, f1


@gluon.jit
def _ws_load(a, HEAD_DIM: gl.constexpr, HALF: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
             OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, NW: gl.constexpr):
    """The producer partition (the default one, ``num_warps`` warps): gathers the block's Q rows
    once, then each key tile's K and V rows into a ring of stages, each handed to the consumers
    through an mbarrier that every producer thread's copies arrive on (``cp.async.mbarrier``)."""
    (q_smem, k_smem, v_smem, q_bar, ready, empty, turn, q_base, k_base, v_base, o_base, LSE, Q_ORDER, Q_POS,
     k_order, k_posp, rng, nseg, row_base, stride_qt, stride_kt, stride_vt, stride_ot, seqlen, seqlen_k, qk_scale,
     m0) = a
    TPW_D: gl.constexpr = HEAD_DIM // 8
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [NW, 1], [1, 0])
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, ld))
    for half in gl.static_range(2):
        offs_m = m0 + half * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, ld))
        ok = offs_m < seqlen
        rows = gl.load(Q_ORDER + row_base + offs_m, mask=ok, other=0)
        q_ok = gl.load(Q_POS + row_base + offs_m, mask=ok, other=-1) >= 0
        async_copy.async_copy_global_to_shared(q_smem.index(half),
                                               q_base + rows.to(gl.int64)[:, None] * stride_qt + offs_d[None, :],
                                               mask=q_ok[:, None])
    async_copy.mbarrier_arrive(q_bar, increment_count=False)
    CHUNK: gl.constexpr = 32 if BLOCK_N > 64 else BLOCK_N  # rows a copy: fewer live addresses a thread
    offs_r = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, ld))
    c = 0
    for s in range(nseg):
        lo, hi, f0, f1 = _segment_tiles(rng, s, BLOCK_N)
        for n in range(lo, hi):
            stage = c % STAGES
            mbarrier.wait(empty.index(stage), ((c // STAGES) & 1) ^ 1)
            for j in gl.static_range(BLOCK_N // CHUNK):
                offs_n = n * BLOCK_N + j * CHUNK + offs_r
                n_ok = offs_n < seqlen_k
                r = gl.load(k_order + offs_n, mask=n_ok, other=0).to(gl.int64)[:, None]
                async_copy.async_copy_global_to_shared(k_smem.index(stage).slice(j * CHUNK, CHUNK),
                                                       k_base + r * stride_kt + offs_d[None, :], mask=n_ok[:, None])
                async_copy.async_copy_global_to_shared(v_smem.index(stage).slice(j * CHUNK, CHUNK),
                                                       v_base + r * stride_vt + offs_d[None, :], mask=n_ok[:, None])
            async_copy.mbarrier_arrive(ready.index(stage), increment_count=False)
            c += 1


@gluon.jit
def _take_turn(turn, half: gl.constexpr, t, PINGPONG: gl.constexpr):
    """Pingpong: wait until the other consumer has issued its products (its ``t``-th turn)."""
    if PINGPONG:
        mbarrier.wait(turn.index(half), t & 1)
    return t + 1


@gluon.jit
def _pass_turn(turn, half: gl.constexpr, PINGPONG: gl.constexpr):
    if PINGPONG:
        mbarrier.arrive(turn.index(1 - half), count=1)


@gluon.jit
def _issue_s(q_h, k_smem, ready, turn, s_zero, c, t, half: gl.constexpr, STAGES: gl.constexpr,
             PINGPONG: gl.constexpr):
    """Wait for the ``c``-th tile's stage, then issue its S = Q K^T in this consumer's turn (the
    caller passes the turn on): (its stage, the product's token, the next turn)."""
    stage = c % STAGES
    mbarrier.wait(ready.index(stage), (c // STAGES) & 1)
    fence_async_shared()  # the copies landed through the generic proxy; the products read async
    t = _take_turn(turn, half, t, PINGPONG)
    s_tok = warpgroup_mma(q_h, k_smem.index(stage).permute((1, 0)), s_zero, use_acc=False, is_async=True)
    return stage, s_tok, t


@gluon.jit
def _ws_compute(a, HEAD_DIM: gl.constexpr, HALF: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, half: gl.constexpr):
    """A consumer partition (one warpgroup): rows ``half`` of the block. Per key tile: wait for its
    stage, S = Q K^T, the online softmax, O += P V, then hand the stage back."""
    (q_smem, k_smem, v_smem, q_bar, ready, empty, turn, q_base, k_base, v_base, o_base, LSE, Q_ORDER, Q_POS,
     k_order, k_posp, rng, nseg, row_base, stride_qt, stride_kt, stride_vt, stride_ot, seqlen, seqlen_k, qk_scale,
     m0) = a
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, BLOCK_N, 16])
    o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, HEAD_DIM, 16])
    p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
    dtype: gl.constexpr = q_smem.dtype
    offs_ms = m0 + half * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, s_layout))
    q_pos = gl.load(Q_POS + row_base + offs_ms, mask=offs_ms < seqlen, other=-1)
    m_i = gl.full([HALF], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([HALF], gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([HALF, HEAD_DIM], gl.float32, layout=o_layout)
    s_zero = gl.zeros([HALF, BLOCK_N], gl.float32, layout=s_layout)
    q_h = q_smem.index(half)
    mbarrier.wait(q_bar, 0)
    c = 0
    t = 0
    for s in range(nseg):
        lo, hi, f0, f1 = _segment_tiles(rng, s, BLOCK_N)
        if OVERLAP:
            # FlashAttention-3's order within the warpgroup: tile n's S is issued before tile n - 1's
            # P V, and tile n's softmax runs while that P V does (per segment: a prologue and a drain)
            if hi > lo:
                stage, s_tok, t = _issue_s(q_h, k_smem, ready, turn, s_zero, c, t, half, STAGES, PINGPONG)
                _pass_turn(turn, half, PINGPONG)
                s_cur = warpgroup_mma_wait(0, deps=(s_tok,))
                p, alpha, m_i, l_i = _softmax_tile(s_cur, m_i, l_i, q_pos, k_posp, lo, f0, f1, seqlen_k, qk_scale,
                                                   BLOCK_N, s_layout)
                acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
                pv_stage = stage
                c += 1
                for n in range(lo + 1, hi):
                    p_op = gl.convert_layout(p.to(dtype), p_layout)
                    stage, s_tok, t = _issue_s(q_h, k_smem, ready, turn, s_zero, c, t, half, STAGES, PINGPONG)
                    acc = warpgroup_mma(p_op, v_smem.index(pv_stage), acc, is_async=True)
                    _pass_turn(turn, half, PINGPONG)
                    s_cur = warpgroup_mma_wait(1, deps=(s_tok,))  # products complete in issue order
                    p, alpha, m_i, l_i = _softmax_tile(s_cur, m_i, l_i, q_pos, k_posp, n, f0, f1, seqlen_k,
                                                       qk_scale, BLOCK_N, s_layout)
                    acc = warpgroup_mma_wait(0, deps=(acc,))
                    mbarrier.arrive(empty.index(pv_stage), count=1)
                    acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
                    pv_stage = stage
                    c += 1
                p_op = gl.convert_layout(p.to(dtype), p_layout)
                t = _take_turn(turn, half, t, PINGPONG)
                acc = warpgroup_mma(p_op, v_smem.index(pv_stage), acc, is_async=True)
                _pass_turn(turn, half, PINGPONG)
                acc = warpgroup_mma_wait(0, deps=(acc,))
                mbarrier.arrive(empty.index(pv_stage), count=1)
        else:
            for n in range(lo, hi):
                stage, s_tok, t = _issue_s(q_h, k_smem, ready, turn, s_zero, c, t, half, STAGES, PINGPONG)
                _pass_turn(turn, half, PINGPONG)
                s_cur = warpgroup_mma_wait(0, deps=(s_tok,))
                p, alpha, m_i, l_i = _softmax_tile(s_cur, m_i, l_i, q_pos, k_posp, n, f0, f1, seqlen_k, qk_scale,
                                                   BLOCK_N, s_layout)
                p = gl.convert_layout(p.to(dtype), p_layout)
                acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, o_layout))[:, None]
                t = _take_turn(turn, half, t, PINGPONG)
                acc = warpgroup_mma(p, v_smem.index(stage), acc, is_async=True)
                _pass_turn(turn, half, PINGPONG)
                acc = warpgroup_mma_wait(0, deps=(acc,))
                mbarrier.arrive(empty.index(stage), count=1)
                c += 1
    empty_rows = l_i == 0.0
    l_safe = gl.where(empty_rows, 1.0, l_i)
    lse = gl.where(empty_rows, float("inf"), m_i + gl.log2(l_safe))
    gl.store(LSE + row_base + offs_ms, lse, mask=offs_ms < seqlen)
    o = acc / gl.convert_layout(l_safe, gl.SliceLayout(1, o_layout))[:, None]
    offs_mo = m0 + half * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, o_layout))
    offs_do = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
    mo_ok = offs_mo < seqlen
    o_rows = gl.load(Q_ORDER + row_base + offs_mo, mask=mo_ok, other=0)
    gl.store(o_base + o_rows.to(gl.int64)[:, None] * stride_ot + offs_do[None, :], o.to(dtype),
             mask=mo_ok[:, None] & (offs_do[None, :] >= 0))


@gluon.jit
def _ws_compute0(a, HEAD_DIM: gl.constexpr, HALF: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                 OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, NW: gl.constexpr):
    _ws_compute(a, HEAD_DIM, HALF, BLOCK_N, STAGES, OVERLAP, PINGPONG, 0)


@gluon.jit
def _ws_compute1(a, HEAD_DIM: gl.constexpr, HALF: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
                 OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, NW: gl.constexpr):
    _ws_compute(a, HEAD_DIM, HALF, BLOCK_N, STAGES, OVERLAP, PINGPONG, 1)


@gluon.jit
def _gl_fwd_ws(Q, K, V, O, LSE, Q_ORDER, Q_POS, K_ORDER, K_POS, RANGES, NSEG, HEAD_MAP,
               stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt,
               stride_vb, stride_vh, stride_vt, stride_ob, stride_oh, stride_ot,
               n_heads_g, seqlen, seqlen_k, n_blocks, qk_scale, k_group, v_group,
               HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, MAX_SEG: gl.constexpr,
               STAGES: gl.constexpr, OVERLAP: gl.constexpr, PINGPONG: gl.constexpr, COMPUTE_REGS: gl.constexpr,
               num_warps: gl.constexpr):
    """The forward with warp specialization: a producer partition (``num_warps`` warps) gathers Q,
    K and V; two consumer warpgroups, 64 query rows each, share every K and V stage and meet
    neither each other nor the producer at a block barrier (mbarriers only)."""
    sm_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    dtype: gl.constexpr = Q.dtype.element_ty
    pid_m = gl.program_id(0)
    pid_bh = gl.program_id(1)
    b = pid_bh // n_heads_g
    hg = pid_bh % n_heads_g
    h = gl.load(HEAD_MAP + hg)
    q_smem = gl.allocate_shared_memory(dtype, [2, BLOCK_M // 2, HEAD_DIM], sm_layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], sm_layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], sm_layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    turn = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    mbarrier.init(q_bar, count=num_warps * 32)  # every producer thread's copies arrive
    if PINGPONG:  # the consumers take turns issuing their products; the first turn is the first one's
        mbarrier.init(turn.index(0), count=1)
        mbarrier.init(turn.index(1), count=1)
        mbarrier.arrive(turn.index(0), count=1)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=num_warps * 32)
        mbarrier.init(empty.index(i), count=2)  # one arrival per consumer warpgroup
    a = (q_smem, k_smem, v_smem, q_bar, ready, empty, turn,
         Q + b.to(gl.int64) * stride_qb + h.to(gl.int64) * stride_qh,
         K + b.to(gl.int64) * stride_kb + (h // k_group).to(gl.int64) * stride_kh,
         V + b.to(gl.int64) * stride_vb + (h // v_group).to(gl.int64) * stride_vh,
         O + b.to(gl.int64) * stride_ob + hg.to(gl.int64) * stride_oh,
         LSE, Q_ORDER, Q_POS,
         K_ORDER + pid_bh.to(gl.int64) * seqlen_k, K_POS + pid_bh.to(gl.int64) * seqlen_k,
         RANGES + (pid_bh.to(gl.int64) * n_blocks + pid_m) * (MAX_SEG * 4),
         gl.load(NSEG + pid_bh.to(gl.int64) * n_blocks + pid_m), pid_bh.to(gl.int64) * seqlen,
         stride_qt, stride_kt, stride_vt, stride_ot, seqlen, seqlen_k, qk_scale, pid_m * BLOCK_M)  # fmt: skip
    # (the constexprs written out in each tuple: a tuple held in a variable turns them into tensors)
    gl.warp_specialize([(_ws_load, (a, HEAD_DIM, BLOCK_M // 2, BLOCK_N, STAGES, OVERLAP, PINGPONG, num_warps)),
                        (_ws_compute0, (a, HEAD_DIM, BLOCK_M // 2, BLOCK_N, STAGES, OVERLAP, PINGPONG, num_warps)),
                        (_ws_compute1, (a, HEAD_DIM, BLOCK_M // 2, BLOCK_N, STAGES, OVERLAP, PINGPONG, num_warps))],
                       [4, 4], [COMPUTE_REGS, COMPUTE_REGS])


def compile_sm90(head_dim: int, block_n: int, stages: int, overlap: bool, max_seg: int = 1, num_warps: int = 8,
                 ws_regs: int = 0, pingpong: bool = False):
    """Compile the probe kernel for sm_90 without a GPU; returns Triton's compiled kernel. ``ws_regs``
    > 0: the warp-specialized kernel, its consumers at that many registers (``overlap`` unused)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    fn = _gl_fwd_ws if ws_regs else _gl_fwd
    const = {"HEAD_DIM": head_dim, "BLOCK_M": 128, "BLOCK_N": block_n, "MAX_SEG": max_seg, "STAGES": stages,
             "num_warps": num_warps}
    const["OVERLAP"] = overlap
    if ws_regs:
        const.update(COMPUTE_REGS=ws_regs, PINGPONG=pingpong)
    sig = _signature(fn, "bf16", const)
    src = GluonASTSource(fn, sig, const, _divisible(fn, sig, strides=True))
    options = dict(num_warps=num_warps, maxnreg=WS_MAXNREG) if ws_regs else dict(num_warps=num_warps)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def gl_forward(q, k, v, g, scale: float, block_n: int, stages: int, overlap: bool, num_warps: int = 8,
               ws_regs: int = 0, pingpong: bool = False):
    """O and LSE of prepared group ``g`` by the probe kernel (layout as the Triton forward's);
    ``ws_regs`` > 0: by the warp-specialized one, its consumers at that many registers."""
    B, H, T, D = q.shape
    Hg = len(g.heads)
    o = torch.empty((B, Hg, T, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, Hg, T), dtype=torch.float32, device=q.device)
    n_blocks = g.q_ranges.shape[2]
    assert g.block_q == 128, g.block_q
    if ws_regs:
        kernel, extra = _gl_fwd_ws, dict(PINGPONG=pingpong, COMPUTE_REGS=ws_regs, num_warps=4, maxnreg=WS_MAXNREG)
    else:
        kernel, extra = _gl_fwd, dict(num_warps=num_warps)
    kernel[(n_blocks, B * Hg)](
        q, k, v, o, lse, g.q_order, g.q_pos, g.k_order, g.k_pos, g.q_ranges, g.q_nseg, g.head_map,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
        Hg, T, k.shape[2], n_blocks, scale * LOG2E, H // k.shape[1], H // v.shape[1],
        HEAD_DIM=D, BLOCK_M=128, BLOCK_N=block_n, MAX_SEG=g.q_ranges.shape[3], STAGES=stages, OVERLAP=overlap,
        **extra,
    )  # fmt: skip
    return o, lse


def _compile_report() -> int:
    for d, bn, st, ov, w in itertools.product((128, 64), (64, 128), (2, 3, 4), (False, True), (8, 4)):
        if ov and st < 4:
            continue
        try:
            r = report(compile_sm90(d, bn, st, ov, num_warps=w))
            print(f"D={d} BLOCK_N={bn} STAGES={st} OVERLAP={ov} warps={w}: regs {r.registers} stack {r.stack} "
                  f"loop spills {r.loop_spills} shared {r.shared}")  # fmt: skip
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"D={d} BLOCK_N={bn} STAGES={st} OVERLAP={ov} warps={w}: FAILED {type(e).__name__}: {str(e)[:1500]}")
    for d, bn, st, regs, ov in itertools.product((128, 64), (64, 128), (2, 3, 4), (232, 224, 216), (False, True)):
        try:
            r = report(compile_sm90(d, bn, st, ov, num_warps=4, ws_regs=regs))
            print(f"D={d} BLOCK_N={bn} STAGES={st} OVERLAP={ov} warp-specialized, consumers at {regs} registers: "
                  f"stack {r.stack} loop spills {r.loop_spills} shared {r.shared}")  # fmt: skip
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"D={d} BLOCK_N={bn} STAGES={st} ws {regs}: FAILED {type(e).__name__}: {str(e)[-1500:]}")
    return 0


def main() -> int:
    args = probe_args("probe_gluon_fwd", "64:2:0,64:3:0,64:3:1,64:4:1,128:2:0,128:3:1",
                      "BLOCK_N:STAGES:OVERLAP[:WARPS] or ws:BLOCK_N:STAGES:COMPUTE_REGS[:OVERLAP[:PINGPONG]],...")
    if args.compile:
        return _compile_report()

    import torch.nn.functional as F
    from bench_models import bf16_inputs, probe_group, probe_results, timed
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from tilesparse.backends.triton.op import forward_tile, launch_fwd
    from tilesparse.ir import tile_stats

    dev = torch.device("cuda")
    res, write = probe_results(args)
    t0 = time.time()

    for shape in args.shapes.split(";"):
        (B, H, Hkv, D, T), q, k, v, _ = bf16_inputs(shape)
        q, k, v = (t.detach() for t in (q, k, v))
        causal = T * (T + 1) // 2 * B * H * 4 * D
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION), torch.no_grad():
            t = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != H))
        cudnn = t["ms"]
        row = {"shape": [B, H, Hkv, D, T], "name": "cudnn", "fwd_ms": cudnn, "fwd_sync_ms": t["sync_ms"],
               "tflops": causal / cudnn / 1e9}  # fmt: skip
        res["rows"].append(row)
        for pname in args.patterns.split(","):
            g, cfg = probe_group(pname, q, k, v)
            scale = D**-0.5
            o_ref = torch.empty((B, len(g.heads), T, D), dtype=q.dtype, device=dev)
            lse_ref = torch.empty((B, len(g.heads), T), dtype=torch.float32, device=dev)
            # its first call fills o_ref and lse_ref; the Triton forward, not the backend's Gluon one
            # (gluon_fwd.py, on by default at D=128 since run 131: run 134's "triton" rows are that kernel)
            tri_cfg = replace(cfg, ws_fwd=0)
            t = timed(lambda: launch_fwd(q, k, v, o_ref, lse_ref, g, scale, tri_cfg))  # noqa: B023
            tri = t["ms"]
            bn_tri = forward_tile(g.group, cfg)
            vis = tile_stats(g, block_n=bn_tri, exact=False)["visited"] * cfg.block_q * bn_tri
            row = {"shape": [B, H, Hkv, D, T], "name": f"{pname} triton", "fwd_ms": tri, "fwd_sync_ms": t["sync_ms"],
                   "tflops": 4 * D * vis / tri / 1e9, "block_n": bn_tri}  # fmt: skip
            res["rows"].append(row)
            print(f"[{time.time() - t0:.0f}s] {row}", file=sys.stderr, flush=True)
            for var in args.variants.split(","):
                if var.startswith("ws"):  # ws:BLOCK_N:STAGES:COMPUTE_REGS[:OVERLAP[:PINGPONG]]
                    bn, st, regs, ov, pp = (int(x) for x in (var + ":0:0").split(":")[1:6])
                    row = {"shape": [B, H, Hkv, D, T], "name": f"{pname} gluon-ws n{bn} s{st} r{regs} ov{ov} pp{pp}"}
                    run = functools.partial(gl_forward, q, k, v, g, scale, bn, st, bool(ov), ws_regs=regs,
                                            pingpong=bool(pp))
                else:
                    bn, st, ov, w = (int(x) for x in (var + ":8").split(":")[:4])
                    row = {"shape": [B, H, Hkv, D, T], "name": f"{pname} gluon n{bn} s{st} ov{ov} w{w}"}
                    run = functools.partial(gl_forward, q, k, v, g, scale, bn, st, bool(ov), w)
                try:
                    o, lse = run()
                    torch.cuda.synchronize()
                    fin = torch.isfinite(lse_ref)
                    row["max_diff_o"] = float((o.float() - o_ref.float()).abs().max())
                    row["max_diff_lse"] = float((lse[fin] - lse_ref[fin]).abs().max()) if fin.any() else 0.0
                    row["lse_inf_match"] = bool(torch.equal(torch.isinf(lse), torch.isinf(lse_ref)))
                    t = timed(run)
                    ms = t["ms"]
                    vis_g = tile_stats(g, block_n=bn, exact=False)["visited"] * 128 * bn
                    row.update(fwd_ms=ms, fwd_sync_ms=t["sync_ms"], tflops=4 * D * vis_g / ms / 1e9, vs_triton=tri / ms)
                except Exception as e:  # noqa: BLE001 - a variant that fails to compile or run
                    row["error"] = repr(e)[:600]
                res["rows"].append(row)
                print(f"[{time.time() - t0:.0f}s] {row}", file=sys.stderr, flush=True)
                write()
        del q, k, v
        torch.cuda.empty_cache()
    write()
    for r in res["rows"]:
        if "error" in r:
            print(f"{r['shape']} {r['name']:32s} ERROR {r['error'][:200]}")
        else:
            extra = f" diff o {r['max_diff_o']:.2e} lse {r['max_diff_lse']:.2e}" if "max_diff_o" in r else ""
            print(f"{r['shape']} {r['name']:32s} {r['fwd_ms']:.3f} ms ({r['fwd_sync_ms']:.3f} synchronized) "
                  f"{r['tflops']:.0f} TF/s{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
