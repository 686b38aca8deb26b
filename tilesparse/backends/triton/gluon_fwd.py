"""The forward kernel with warp specialization, written in Gluon for Hopper (sm_90).

It computes what ``kernels._attn_fwd``'s unchanged variant computes, from the same arguments
but the workspace (it does not split: ``TileConfig.fwd_split``):
per query block of the query layout (128 rows, the IR's ``block_q``), O and the log-sum-exp
(log2 units, +inf for a row that keeps no key) over the block's key-row ranges, with every
predicate the IR can produce, one masked loop or three per segment, and the same nonfinite
protocol (nonfinite.py: it flags a stored output that is not finite, and the Triton kernel's
sanitizing variant, launched after it, then writes O and the lse again).

Three partitions meet only at mbarriers, as in gluon_dq.py:

- the *producer* (the default partition, 4 warps at few registers) gathers the block's Q rows
  once, then each 128-key tile's K and V rows through the key layout order into a ring of
  shared-memory stages (``cp.async``), in copies of 32 rows: one copy of all 128 rows keeps
  more addresses live than the producer's registers hold, and spilled;
- two *consumers* (a warpgroup each, 64 query rows each) share every stage: S = Q K^T, the
  online softmax, then O += P V; each hands the stage back.

The Triton forward gathers K and V in the warps that compute and takes 64-key tiles at D=128;
here the gathers overlap the products and the tiles are FlashAttention-3's 128 x 128.

Gluon kernels do not run under ``TRITON_INTERPRET=1``: CI compiles this one for sm_90
(tests/backends/triton/test_compile_gluon_sm90.py); the GPU tests check it against the masked
reference and against the Triton kernel (tests/gpu/test_gluon_fwd_gpu.py).
"""

from __future__ import annotations

import functools

import torch

from .gluon_dkdv import GLUON_TRITON, KEY_SENTINEL, _keep, _scheduled, _tiles, gluon_reason
from .gluon_dq import BLOCK_M, _flag_and_store, _init_ring, _kv_stages, block_reason, launch_constants
from .gluon_dq import DqConfig as FwdConfig
from .launch import LeanKernel, Site, lean_supported

__all__ = ["BLOCK_M", "GLUON_TRITON", "FwdConfig", "fwd_config", "launch", "site", "unusable"]

COPY_ROWS = 32  # rows of K or V a producer copy gathers
# FwdConfig, the launch shape: gluon_dq.DqConfig's fields (key tile width, ring stages, the
# consumers' registers, the kernel's register cap), BLOCK_M its 128-row query block


# per head dim (benchmarks/probe_gluon_fwd.py, run 130; kernel times against the Triton forward on the same
# prepared groups). D=128: 128-key tiles in 2 stages at 224 consumer registers, QKDrop 0.7 / 0.5 at B=1, H=32,
# Hkv=8, T=32k 9.42 / 4.98 ms against 9.91 / 5.04, at 16k 2.50 / 1.41 against 2.67 / 1.56, at B=2, H=12, 16k
# 1.92 / 1.08 against 2.15 / 1.19 (232 registers: 9.35 / 5.06, 2.53 / 1.51, 1.96 / 1.19; the consumers taking
# turns no faster; FlashAttention-3's overlapped order 1.4-1.6x slower; 64-key tiles in 3 stages 0.97-1.07x the
# Triton forward). No variant spills. 3 stages of 128-key tiles fit (229,648 bytes of shared memory) and were
# within the spread of two timings of this shape in run 134 (up to 4%). D=64: the
# 64-key probe kernel was even with the Triton forward (run 116), so there the Triton kernel runs
_CONFIGS = {128: FwdConfig(128, 2, 224)}


def fwd_config(head_dim: int) -> FwdConfig | None:
    """The kernel's launch shape for ``head_dim``; None where it has none (the Triton kernel runs)."""
    return _CONFIGS.get(head_dim)


def unusable(q: torch.Tensor, block_q: int) -> str | None:
    """Why this kernel cannot take the forward of ``q``'s call on a CUDA device (None when it can)."""
    return _unusable_on(q.device.index if q.device.index is not None else torch.cuda.current_device(), q.dtype,
                        q.shape[-1], block_q)


@functools.cache
def _unusable_on(device: int, dtype: torch.dtype, head_dim: int, block_q: int) -> str | None:
    return gluon_reason(device, dtype, head_dim, _CONFIGS, block_reason(block_q))


def launch(grid: tuple[int, int], args: tuple, *, head_dim: int, max_seg: int, flags: dict,
           config: FwdConfig | None = None) -> None:
    """O into ``args``' O and the lse into its LSE: ``args`` are ``kernels._attn_fwd``'s runtime
    arguments (through ``v_group``) but its ``WORK``; ``flags`` its predicate and loop flags (op._flags);
    ``config`` another launch shape than ``fwd_config(head_dim)`` (benchmarks, sweeps)."""
    _launcher().launch(grid, args, launch_constants(config or fwd_config(head_dim), head_dim, max_seg, flags))


def site(grid: tuple[int, int], *, head_dim: int, max_seg: int, flags: dict) -> Site:
    """The :class:`~.launch.Site` of :func:`launch`'s launches at ``grid`` (as gluon_dq.site)."""
    return Site(_launcher(), grid, launch_constants(fwd_config(head_dim), head_dim, max_seg, flags))


@functools.cache
def _launcher() -> LeanKernel:
    # as gluon_dkdv._launcher: Triton's lean path by hand for a Gluon kernel
    return LeanKernel(_attn_fwd_ws, enabled=lean_supported())


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

_COPY_ROWS = gl.constexpr(COPY_ROWS)


@gluon.jit
def _load(a, HEAD_DIM: gl.constexpr, HALF: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
          SINGLE_LOOP: gl.constexpr, NW: gl.constexpr):
    """The producer partition: the block's Q rows, then K and V rows per key tile."""
    (q_smem, k_smem, v_smem, q_bar, ready, empty, q_base, k_base, v_base, o_base, q_order, q_posp, q_bktp,
     k_order, k_posp, k_bktp, lsep, rng, nseg, NONFINITE, stride_qt, stride_kt, stride_vt, stride_ot, seqlen,
     seqlen_k, qk_scale, m0) = a
    TPW_D: gl.constexpr = HEAD_DIM // 8
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [NW, 1], [1, 0])
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, ld))
    for half in gl.static_range(2):
        offs_m = m0 + half * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, ld))
        ok = offs_m < seqlen
        rows = gl.load(q_order + offs_m, mask=ok, other=0).to(gl.int64)[:, None]
        # a dropped query's row reads as zeros, as in the Triton kernel
        q_ok = (gl.load(q_posp + offs_m, mask=ok, other=-1) >= 0)[:, None]
        async_copy.async_copy_global_to_shared(q_smem.index(half), q_base + rows * stride_qt + offs_d[None, :],
                                               mask=q_ok)
    async_copy.mbarrier_arrive(q_bar, increment_count=False)
    CHUNK: gl.constexpr = _COPY_ROWS if BLOCK_N > _COPY_ROWS else BLOCK_N
    _kv_stages(k_smem, v_smem, ready, empty, k_base, v_base, k_order, rng, nseg, stride_kt, stride_vt, seqlen_k,
               offs_d, BLOCK_N, STAGES, SINGLE_LOOP, CHUNK, ld)


@gluon.jit
def _compute(a, HEAD_DIM: gl.constexpr, HALF: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
             SINGLE_LOOP: gl.constexpr, CAUSAL: gl.constexpr, STRICT: gl.constexpr, SAME_BUCKET: gl.constexpr,
             NOT_SELF: gl.constexpr, half: gl.constexpr):
    """A consumer partition (one warpgroup): rows ``half`` of the block. Per key tile S = Q K^T,
    the online softmax and O += P V; then O and the lse."""
    (q_smem, k_smem, v_smem, q_bar, ready, empty, q_base, k_base, v_base, o_base, q_order, q_posp, q_bktp,
     k_order, k_posp, k_bktp, lsep, rng, nseg, NONFINITE, stride_qt, stride_kt, stride_vt, stride_ot, seqlen,
     seqlen_k, qk_scale, m0) = a
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, BLOCK_N, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                          instr_shape=[16, HEAD_DIM, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    dtype: gl.constexpr = q_smem.dtype
    q_h = q_smem.index(half)
    offs_ms = m0 + half * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, s_layout))
    ms_ok = offs_ms < seqlen
    q_pos = gl.load(q_posp + offs_ms, mask=ms_ok, other=-1)
    q_bkt = q_pos
    if SAME_BUCKET:
        q_bkt = gl.load(q_bktp + offs_ms, mask=ms_ok, other=-1)
    m_i = gl.full([HALF], float("-inf"), gl.float32, layout=gl.SliceLayout(1, s_layout))
    l_i = gl.zeros([HALF], gl.float32, layout=gl.SliceLayout(1, s_layout))
    acc = gl.zeros([HALF, HEAD_DIM], gl.float32, layout=acc_layout)
    s_zero = gl.zeros([HALF, BLOCK_N], gl.float32, layout=s_layout)
    offs_c = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s_layout))
    mbarrier.wait(q_bar, 0)
    c = 0
    for s in range(nseg):
        lo, hi, f0, f1 = _tiles(rng, s, BLOCK_N, SINGLE_LOOP)
        for n in range(lo, hi):
            stage = c % STAGES
            mbarrier.wait(ready.index(stage), (c // STAGES) & 1)
            fence_async_shared()  # the copies landed through the generic proxy; the products read async
            s_tok = warpgroup_mma(q_h, k_smem.index(stage).permute((1, 0)), s_zero, use_acc=False, is_async=True)
            qk = warpgroup_mma_wait(0, deps=(s_tok,)) * qk_scale
            if (n < f0) | (n >= f1):
                offs_n = n * BLOCK_N + offs_c
                n_ok = offs_n < seqlen_k
                k_pos = gl.load(k_posp + offs_n, mask=n_ok, other=KEY_SENTINEL)
                k_bkt = k_pos
                if SAME_BUCKET:
                    k_bkt = gl.load(k_bktp + offs_n, mask=n_ok, other=-2)
                keep = _keep(q_pos[:, None], k_pos[None, :], q_bkt[:, None], k_bkt[None, :], CAUSAL, STRICT,
                             SAME_BUCKET, NOT_SELF)
                qk = gl.where(keep, qk, float("-inf"))
            m_new = gl.maximum(m_i, gl.max(qk, 1))
            # SCFA's guard: a row with nothing kept so far subtracts 0, not -inf
            m_safe = gl.where(m_new == float("-inf"), 0.0, m_new)
            p = gl.exp2(qk - m_safe[:, None])
            alpha = gl.exp2(m_i - m_safe)
            l_i = l_i * alpha + gl.sum(p, 1)
            acc = acc * gl.convert_layout(alpha, gl.SliceLayout(1, acc_layout))[:, None]
            acc = warpgroup_mma(gl.convert_layout(p.to(dtype), op_layout), v_smem.index(stage), acc, is_async=True)
            acc = warpgroup_mma_wait(0, deps=(acc,))
            mbarrier.arrive(empty.index(stage), count=1)
            m_i = m_new
            c += 1

    empty_rows = l_i == 0.0
    l_safe = gl.where(empty_rows, 1.0, l_i)
    # lse in log2 units; +inf marks a row with no kept key (zero probabilities in backward)
    gl.store(lsep + offs_ms, gl.where(empty_rows, float("inf"), m_i + gl.log2(l_safe)), mask=ms_ok)
    o = acc / gl.convert_layout(l_safe, gl.SliceLayout(1, acc_layout))[:, None]
    offs_mo = m0 + half * HALF + gl.arange(0, HALF, layout=gl.SliceLayout(1, acc_layout))
    offs_do = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, acc_layout))
    mo_ok = offs_mo < seqlen
    _flag_and_store(o, o_base, stride_ot, q_order, offs_mo, mo_ok, offs_do, NONFINITE)


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
def _attn_fwd_ws(Q, K, V, O, LSE,
          Q_ORDER, Q_POS, Q_BKT, K_ORDER, K_POS, K_BKT, RANGES, NSEG, HEAD_MAP, NONFINITE,
          stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt, stride_vb, stride_vh, stride_vt,
          stride_ob, stride_oh, stride_ot,
          n_heads_g, seqlen, seqlen_k, n_blocks, qk_scale, k_group, v_group,
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
    k_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], sm_layout)
    v_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_N, HEAD_DIM], sm_layout)
    q_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    _init_ring(q_bar, ready, empty, STAGES, num_warps)
    row_base = pid_bh.to(gl.int64) * seqlen
    row_base_k = pid_bh.to(gl.int64) * seqlen_k
    a = (q_smem, k_smem, v_smem, q_bar, ready, empty,
         Q + b.to(gl.int64) * stride_qb + h.to(gl.int64) * stride_qh,
         K + b.to(gl.int64) * stride_kb + (h // k_group).to(gl.int64) * stride_kh,
         V + b.to(gl.int64) * stride_vb + (h // v_group).to(gl.int64) * stride_vh,
         O + b.to(gl.int64) * stride_ob + hg.to(gl.int64) * stride_oh,
         Q_ORDER + row_base, Q_POS + row_base, Q_BKT + row_base,
         K_ORDER + row_base_k, K_POS + row_base_k, K_BKT + row_base_k,
         LSE + row_base,
         RANGES + (pid_bh.to(gl.int64) * n_blocks + pid_m) * (MAX_SEG * 4),
         gl.load(NSEG + pid_bh.to(gl.int64) * n_blocks + pid_m), NONFINITE,
         stride_qt, stride_kt, stride_vt, stride_ot, seqlen, seqlen_k, qk_scale, pid_m * BLOCK_M)  # fmt: skip
    # the constexprs written out in each tuple: a tuple held in a variable turns them into tensors
    gl.warp_specialize([
        (_load, (a, HEAD_DIM, HALF, BLOCK_N, STAGES, SINGLE_LOOP, num_warps)),
        (_compute0, (a, HEAD_DIM, HALF, BLOCK_N, STAGES, SINGLE_LOOP, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF)),
        (_compute1, (a, HEAD_DIM, HALF, BLOCK_N, STAGES, SINGLE_LOOP, CAUSAL, STRICT, SAME_BUCKET, NOT_SELF)),
    ], [4, 4], [COMPUTE_REGS, COMPUTE_REGS])  # fmt: skip
