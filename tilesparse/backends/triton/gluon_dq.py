"""The dQ kernel with warp specialization, written in Gluon for Hopper (sm_90).

It computes what ``kernels._attn_bwd_dq``'s unchanged variant computes, from the same arguments
but the workspace (it does not split: ``TileConfig.dq_split``):
per query block of the query layout (128 rows, the IR's ``block_q``), delta = rowsum(dO * O) of
its rows (stored for the dK/dV kernel) and dQ over the block's key-row ranges, with every
predicate the IR can produce, one masked loop or three per segment, and the same nonfinite
protocol (nonfinite.py: it flags a stored dQ that is not finite, and the Triton kernel's
sanitizing variant, launched after it, then writes dQ and delta again).

Three partitions meet only at mbarriers:

- the *producer* (the default partition, 4 warps at few registers) gathers the block's Q and
  dO rows once, then each key tile's K and V rows through the key layout order into a ring of
  shared-memory stages (``cp.async``; every producer thread's copies arrive on the stage's
  mbarrier when they land);
- two *consumers* (a warpgroup each, 64 query rows each, with the registers the producer gives
  up) share every stage: S = Q K^T and dP = dO V^T issued together, the probabilities while dP
  runs, then dQ += dS K; each hands the stage back.

The Triton kernel gathers K and V in the warps that compute and, at D=128, takes 32-wide key
tiles to stay within its registers; here the producer's gathers overlap the consumers'
products, and the tiles are 64 keys wide. The dK/dV kernel of gluon_dkdv.py has the same
structure with one consumer.

Gluon kernels do not run under ``TRITON_INTERPRET=1``: CI compiles this one for sm_90
(tests/backends/triton/test_compile_gluon_sm90.py); the GPU tests check it against the masked
reference and against the Triton kernel (tests/gpu/test_gluon_dq_gpu.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .gluon_dkdv import GLUON_TRITON, KEY_SENTINEL, _keep, _scheduled, _tiles, gluon_reason
from .launch import LeanKernel, Site, lean_supported

__all__ = ["BLOCK_M", "GLUON_TRITON", "DqConfig", "block_reason", "dq_config", "launch", "launch_constants", "site",
           "unusable"]

BLOCK_M = 128  # the query block: the IR's block_q, two consumers of 64 rows


@dataclass(frozen=True)
class DqConfig:
    """Launch shape of the kernel (and of gluon_fwd.py's, ``FwdConfig``): key tile width, ring
    stages, the consumers' registers and the kernel's register cap (``maxnreg``: 12 warps at 168
    fill an SM's 64K registers; the producer keeps 3 x 168 - 2 x ``regs`` a thread)."""

    block_n: int
    stages: int
    regs: int
    maxnreg: int = 168


# per head dim (benchmarks/probe_gluon_bwd.py --kernel dq, runs 123 and 126; kernel times against the Triton dQ
# kernel). D=128: 64-key tiles in 3 stages, QKDrop 0.7 / 0.3 and Hash(16) at B=1, H=32, Hkv=8, T=32k 1.13x /
# 1.13x / 1.11x at 224 consumer registers (2 stages: 1.14x / 1.05x / 1.06x; 128-key tiles 0.56-0.99x). Run
# 126: at 216 (the producer keeps 72) 1.15x / 1.19x / 1.08x, and at B=2, H=12, T=16k 1.19x / 1.22x / 1.09x,
# the same as 224 or faster in all six rows; 4 stages no faster, 32-key tiles 0.99-1.08x. D=64 (B=2, H=12,
# T=16k): every shape 0.73-0.93x, so the backend keeps the Triton kernel there (op.tile_config). At 232
# registers the producer keeps 40 and spills in its loop at D=128; at 224 and below nothing spills
_CONFIGS = {64: DqConfig(64, 3, 216), 128: DqConfig(64, 3, 216)}


def dq_config(head_dim: int) -> DqConfig | None:
    """The kernel's launch shape for ``head_dim``; None where it has none (the Triton kernel runs)."""
    return _CONFIGS.get(head_dim)


def unusable(q: torch.Tensor, block_q: int) -> str | None:
    """Why this kernel cannot take dQ of ``q``'s call on a CUDA device (None when it can)."""
    return _unusable_on(q.device.index if q.device.index is not None else torch.cuda.current_device(), q.dtype,
                        q.shape[-1], block_q)


@functools.cache
def _unusable_on(device: int, dtype: torch.dtype, head_dim: int, block_q: int) -> str | None:
    return gluon_reason(device, dtype, head_dim, _CONFIGS, block_reason(block_q))


def block_reason(block_q: int) -> str | None:
    """Why a kernel over 128-row query blocks (this one, gluon_fwd.py's) cannot take ``block_q``."""
    return None if block_q == BLOCK_M else f"query blocks of {block_q} rows (the kernel takes {BLOCK_M})"


def launch(grid: tuple[int, int], args: tuple, *, head_dim: int, max_seg: int, flags: dict,
           config: DqConfig | None = None) -> None:
    """dQ into ``args``' DQ and delta into its DELTA: ``args`` are ``kernels._attn_bwd_dq``'s
    runtime arguments (through ``v_group``) but its ``WORK``; ``flags`` its predicate and loop flags (op._flags);
    ``config`` another launch shape than ``dq_config(head_dim)`` (benchmarks, sweeps)."""
    _launcher().launch(grid, args, launch_constants(config or dq_config(head_dim), head_dim, max_seg, flags))


def site(grid: tuple[int, int], *, head_dim: int, max_seg: int, flags: dict) -> Site:
    """The :class:`~.launch.Site` of :func:`launch`'s launches at ``grid``: the dQ launch pair's
    unchanged variant (op.Launches), keyed per call by its tensors' dtypes and its scalars only."""
    return Site(_launcher(), grid, launch_constants(dq_config(head_dim), head_dim, max_seg, flags))


def launch_constants(cfg: DqConfig, head_dim: int, max_seg: int, flags: dict) -> dict:
    """The compile-time constants and launch options of a kernel over 128-row query blocks (this
    one, gluon_fwd.py's) at launch shape ``cfg``."""
    return dict(
        HEAD_DIM=head_dim, BLOCK_M=BLOCK_M, BLOCK_N=cfg.block_n, MAX_SEG=max_seg, **flags, STAGES=cfg.stages,
        COMPUTE_REGS=cfg.regs, num_warps=4, maxnreg=cfg.maxnreg,
    )  # fmt: skip


@functools.cache
def _launcher() -> LeanKernel:
    # as gluon_dkdv._launcher: Triton's lean path by hand for a Gluon kernel
    return LeanKernel(_attn_bwd_dq_ws, enabled=lean_supported())


# --- the kernel -----------------------------------------------------------------------------

from triton.experimental import gluon  # noqa: E402  (after the pure-Python part: import cost)
from triton.experimental.gluon import language as gl  # noqa: E402
from triton.experimental.gluon.language.nvidia.hopper import (  # noqa: E402
    async_copy,
    fence_async_shared,
    mbarrier,
    warpgroup_mma,
    warpgroup_mma_wait,
)


@gluon.jit
def _load(a, HEAD_DIM: gl.constexpr, HALF: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
          SINGLE_LOOP: gl.constexpr, NW: gl.constexpr):
    """The producer partition: the block's Q and dO rows, then K and V rows per key tile."""
    (q_smem, do_smem, k_smem, v_smem, q_bar, ready, empty, q_base, do_base, o_base, k_base, v_base, dq_base,
     q_order, q_posp, q_bktp, k_order, k_posp, k_bktp, lsep, deltap, rng, nseg, NONFINITE, stride_qt, stride_dot,
     stride_ot, stride_kt, stride_vt, stride_dqt, seqlen, seqlen_k, qk_scale, sm_scale, m0) = a
    TPW_D: gl.constexpr = HEAD_DIM // 8
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [NW, 1], [1, 0])
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, ld))
    for half in gl.static_range(2):
        offs_m = m0 + half * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, ld))
        ok = offs_m < seqlen
        rows = gl.load(q_order + offs_m, mask=ok, other=0).to(gl.int64)[:, None]
        # a dropped query's rows read as zeros, as in the Triton kernel
        q_ok = (gl.load(q_posp + offs_m, mask=ok, other=-1) >= 0)[:, None]
        async_copy.async_copy_global_to_shared(q_smem.index(half), q_base + rows * stride_qt + offs_d[None, :],
                                               mask=q_ok)
        async_copy.async_copy_global_to_shared(do_smem.index(half), do_base + rows * stride_dot + offs_d[None, :],
                                               mask=q_ok)
    async_copy.mbarrier_arrive(q_bar, increment_count=False)
    _kv_stages(k_smem, v_smem, ready, empty, k_base, v_base, k_order, rng, nseg, stride_kt, stride_vt, seqlen_k,
               offs_d, BLOCK_N, STAGES, SINGLE_LOOP, BLOCK_N, ld)


@gluon.jit
def _kv_stages(k_smem, v_smem, ready, empty, k_base, v_base, k_order, rng, nseg, stride_kt, stride_vt, seqlen_k,
               offs_d, BLOCK_N: gl.constexpr, STAGES: gl.constexpr, SINGLE_LOOP: gl.constexpr, CHUNK: gl.constexpr,
               ld: gl.constexpr):
    """The producer's key-tile loop (this kernel's and gluon_fwd.py's): each key tile's K and V rows
    through the key layout order into the next stage once both consumers handed it back, in copies
    of ``CHUNK`` rows (a copy keeps an address a thread live per 8 of its elements)."""
    offs_r = gl.arange(0, CHUNK, layout=gl.SliceLayout(1, ld))
    c = 0
    for s in range(nseg):
        lo, hi, f0, f1 = _tiles(rng, s, BLOCK_N, SINGLE_LOOP)
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
def _compute(a, HEAD_DIM: gl.constexpr, HALF: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
             SINGLE_LOOP: gl.constexpr, CAUSAL: gl.constexpr, STRICT: gl.constexpr, SAME_BUCKET: gl.constexpr,
             NOT_SELF: gl.constexpr, half: gl.constexpr):
    """A consumer partition (one warpgroup): rows ``half`` of the block. Delta of its rows, then per
    key tile the three products, then dQ."""
    (q_smem, do_smem, k_smem, v_smem, q_bar, ready, empty, q_base, do_base, o_base, k_base, v_base, dq_base,
     q_order, q_posp, q_bktp, k_order, k_posp, k_bktp, lsep, deltap, rng, nseg, NONFINITE, stride_qt, stride_dot,
     stride_ot, stride_kt, stride_vt, stride_dqt, seqlen, seqlen_k, qk_scale, sm_scale, m0) = a
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, BLOCK_N, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                          instr_shape=[16, HEAD_DIM, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    TPW_D: gl.constexpr = HEAD_DIM // 8
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [4, 1], [1, 0])
    dtype: gl.constexpr = q_smem.dtype
    q_h = q_smem.index(half)
    do_h = do_smem.index(half)

    # delta = rowsum(dO * O) of this half's rows (dropped rows: 0, their O and dO read as 0)
    offs_ml = m0 + half * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, ld))
    offs_dl = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, ld))
    ml_ok = offs_ml < seqlen
    rows_l = gl.load(q_order + offs_ml, mask=ml_ok, other=0).to(gl.int64)[:, None]
    keep_l = (gl.load(q_posp + offs_ml, mask=ml_ok, other=-1) >= 0)[:, None] & (offs_dl[None, :] >= 0)
    o = gl.load(o_base + rows_l * stride_ot + offs_dl[None, :], mask=keep_l, other=0.0)
    mbarrier.wait(q_bar, 0)
    do = do_h.load(ld)
    di_l = gl.sum(o.to(gl.float32) * do.to(gl.float32), 1)
    gl.store(deltap + offs_ml, di_l, mask=ml_ok)
    di = gl.convert_layout(di_l, gl.SliceLayout(1, s_layout))

    offs_ms = m0 + half * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, s_layout))
    ms_ok = offs_ms < seqlen
    q_pos = gl.load(q_posp + offs_ms, mask=ms_ok, other=-1)
    q_bkt = q_pos
    if SAME_BUCKET:
        q_bkt = gl.load(q_bktp + offs_ms, mask=ms_ok, other=-1)
    lse = gl.load(lsep + offs_ms, mask=ms_ok, other=float("inf"))
    dq = gl.zeros([HALF, HEAD_DIM], gl.float32, layout=acc_layout)
    s_zero = gl.zeros([HALF, BLOCK_N], gl.float32, layout=s_layout)
    offs_c = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    c = 0
    for s in range(nseg):
        lo, hi, f0, f1 = _tiles(rng, s, BLOCK_N, SINGLE_LOOP)
        for n in range(lo, hi):
            stage = c % STAGES
            mbarrier.wait(ready.index(stage), (c // STAGES) & 1)
            fence_async_shared()  # the copies landed through the generic proxy; the products read async
            k_st = k_smem.index(stage)
            s_tok = warpgroup_mma(q_h, k_st.permute((1, 0)), s_zero, use_acc=False, is_async=True)
            dp_tok = warpgroup_mma(do_h, v_smem.index(stage).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            s_cur = warpgroup_mma_wait(1, deps=(s_tok,))  # products complete in issue order
            p = gl.exp2(s_cur * qk_scale - lse[:, None])
            if (n < f0) | (n >= f1):
                offs_n = n * BLOCK_N + offs_c
                n_ok = offs_n < seqlen_k
                k_pos = gl.load(k_posp + offs_n, mask=n_ok, other=KEY_SENTINEL)
                k_bkt = k_pos
                if SAME_BUCKET:
                    k_bkt = gl.load(k_bktp + offs_n, mask=n_ok, other=-2)
                keep = _keep(q_pos[:, None], k_pos[None, :], q_bkt[:, None], k_bkt[None, :], CAUSAL, STRICT,
                             SAME_BUCKET, NOT_SELF)
                p = gl.where(keep, p, 0.0)
            dp = warpgroup_mma_wait(0, deps=(dp_tok,))
            ds = p * (dp - di[:, None])
            dq = warpgroup_mma(gl.convert_layout(ds.to(dtype), op_layout), k_st, dq, is_async=True)
            dq = warpgroup_mma_wait(0, deps=(dq,))
            mbarrier.arrive(empty.index(stage), count=1)
            c += 1

    offs_mo = m0 + half * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, acc_layout))
    offs_do = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, acc_layout))
    mo_ok = offs_mo < seqlen
    _flag_and_store(dq * sm_scale, dq_base, stride_dqt, q_order, offs_mo, mo_ok, offs_do, NONFINITE)


@gluon.jit
def _init_ring(q_bar, ready, empty, STAGES: gl.constexpr, NW: gl.constexpr):
    """The barriers of a block with one producer of ``NW`` warps and two consumers (this kernel's,
    gluon_fwd.py's): the query rows' and each stage's arrive once per producer thread's copies,
    each stage's ``empty`` once per consumer."""
    mbarrier.init(q_bar, count=NW * 32)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=NW * 32)
        mbarrier.init(empty.index(i), count=2)


@gluon.jit
def _flag_and_store(x, out_base, stride, q_order, offs_m, m_ok, offs_d, NONFINITE):
    """Store a consumer's rows ``x`` of the query block (``offs_m`` of the query layout) to their
    tokens' rows at ``out_base``; set the flag at NONFINITE when one is inf or NaN (as
    ``kernels._flag_nonfinite``: a finite row whose sum overflows sets it too)."""
    out_ok = m_ok[:, None] & (offs_d[None, :] >= 0)
    rows = gl.sum(gl.where(out_ok, x, 0.0), 1)  # a sum holding an inf or NaN is not finite
    if gl.max(gl.where(gl.abs(rows) < float("inf"), 0, 1), 0) != 0:
        gl.store(NONFINITE, 1)
    q_rows = gl.load(q_order + offs_m, mask=m_ok, other=0).to(gl.int64)[:, None]
    gl.store(out_base + q_rows * stride + offs_d[None, :], x.to(out_base.dtype.element_ty), mask=out_ok)


@gluon.jit
def _compute0(a, HEAD_DIM: gl.constexpr, HALF: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              SINGLE_LOOP: gl.constexpr, CAUSAL: gl.constexpr, STRICT: gl.constexpr, SAME_BUCKET: gl.constexpr,
              NOT_SELF: gl.constexpr):
    _compute(a, HEAD_DIM, HALF, BLOCK_N, STAGES, SINGLE_LOOP, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF, 0)


@gluon.jit
def _compute1(a, HEAD_DIM: gl.constexpr, HALF: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              SINGLE_LOOP: gl.constexpr, CAUSAL: gl.constexpr, STRICT: gl.constexpr, SAME_BUCKET: gl.constexpr,
              NOT_SELF: gl.constexpr):
    _compute(a, HEAD_DIM, HALF, BLOCK_N, STAGES, SINGLE_LOOP, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF, 1)


@gluon.jit
def _attn_bwd_dq_ws(Q, K, V, O, DO, DQ, LSE, DELTA,
          Q_ORDER, Q_POS, Q_BKT, K_ORDER, K_POS, K_BKT, RANGES, NSEG, HEAD_MAP, NONFINITE,
          stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt, stride_vb, stride_vh, stride_vt,
          stride_ob, stride_oh, stride_ot, stride_dob, stride_doh, stride_dot, stride_dqb, stride_dqh, stride_dqt,
          n_heads_g, seqlen, seqlen_k, n_blocks, qk_scale, sm_scale, k_group, v_group,
          HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, MAX_SEG: gl.constexpr,
          CAUSAL: gl.constexpr, STRICT: gl.constexpr, SAME_BUCKET: gl.constexpr, NOT_SELF: gl.constexpr,
          SINGLE_LOOP: gl.constexpr, STAGES: gl.constexpr, COMPUTE_REGS: gl.constexpr, num_warps: gl.constexpr,
          HEAVY_FIRST: gl.constexpr = False):
    """One query block (BLOCK_M rows of the query layout) against its key-row ranges."""
    sm_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    dtype: gl.constexpr = Q.dtype.element_ty
    HALF: gl.constexpr = BLOCK_M // 2
    pid_m, pid_bh = _scheduled(HEAVY_FIRST, True)
    b = pid_bh // n_heads_g
    hg = pid_bh % n_heads_g
    h = gl.load(HEAD_MAP + hg)
    q_smem = gl.allocate_shared_memory(dtype, [2, HALF, HEAD_DIM], sm_layout)
    do_smem = gl.allocate_shared_memory(dtype, [2, HALF, HEAD_DIM], sm_layout)
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], sm_layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], sm_layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    _init_ring(q_bar, ready, empty, STAGES, num_warps)
    row_base = pid_bh.to(gl.int64) * seqlen
    row_base_k = pid_bh.to(gl.int64) * seqlen_k
    a = (q_smem, do_smem, k_smem, v_smem, q_bar, ready, empty,
         Q + b.to(gl.int64) * stride_qb + h.to(gl.int64) * stride_qh,
         DO + b.to(gl.int64) * stride_dob + hg.to(gl.int64) * stride_doh,
         O + b.to(gl.int64) * stride_ob + hg.to(gl.int64) * stride_oh,
         K + b.to(gl.int64) * stride_kb + (h // k_group).to(gl.int64) * stride_kh,
         V + b.to(gl.int64) * stride_vb + (h // v_group).to(gl.int64) * stride_vh,
         DQ + b.to(gl.int64) * stride_dqb + h.to(gl.int64) * stride_dqh,
         Q_ORDER + row_base, Q_POS + row_base, Q_BKT + row_base,
         K_ORDER + row_base_k, K_POS + row_base_k, K_BKT + row_base_k,
         LSE + row_base, DELTA + row_base,
         RANGES + (pid_bh.to(gl.int64) * n_blocks + pid_m) * (MAX_SEG * 4),
         gl.load(NSEG + pid_bh.to(gl.int64) * n_blocks + pid_m), NONFINITE,
         stride_qt, stride_dot, stride_ot, stride_kt, stride_vt, stride_dqt, seqlen, seqlen_k, qk_scale, sm_scale,
         pid_m * BLOCK_M)  # fmt: skip
    # the constexprs written out in each tuple: a tuple held in a variable turns them into tensors
    gl.warp_specialize([
        (_load, (a, HEAD_DIM, HALF, BLOCK_N, STAGES, SINGLE_LOOP, num_warps)),
        (_compute0, (a, HEAD_DIM, HALF, BLOCK_N, STAGES, SINGLE_LOOP, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF)),
        (_compute1, (a, HEAD_DIM, HALF, BLOCK_N, STAGES, SINGLE_LOOP, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF)),
    ], [4, 4], [COMPUTE_REGS, COMPUTE_REGS])  # fmt: skip
