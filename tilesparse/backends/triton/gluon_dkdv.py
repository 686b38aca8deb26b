"""The dK/dV kernel with warp specialization, written in Gluon (Triton's lower-level language)
for Hopper (sm_90).

It computes what ``kernels._attn_bwd_dkdv``'s unchanged variant computes, from the same
arguments: per key block of the key layout, dK and dV over the block's query-row ranges, with
every predicate the IR can produce (causal, strict, same bucket, not self), one masked loop or
three per segment, into the kv heads or per query head (GQA), and the same nonfinite protocol
(nonfinite.py: it stores nothing when the dQ kernel flagged a value that is not finite, and
flags its own; the Triton kernel's sanitizing variant then writes the outputs).

Two partitions meet only at mbarriers, never at a block barrier:

- the *producer* (the default partition, 4 warps at few registers) gathers the block's K and V
  rows once, then each query tile's Q and dO rows through the layout order into a ring of
  shared-memory stages (``cp.async``; every producer thread's copies arrive on the stage's
  mbarrier when they land);
- the *consumer* (one warpgroup, with the registers the producer gives up) waits for a stage
  and runs the tile's four products: S^T = K Q^T and dP^T = V dO^T issued together, the
  probabilities while dP^T runs, then dV += P^T dO and dK += dS^T Q; then hands the stage back.

Why (docs/kernels.md, "Adopted: the dK/dV kernel with warp specialization"): the Triton kernel
gathers the tiles in the warps that compute, at 255 registers with spills at D=128, and waits at
once for each product. The backend takes this kernel where ``TileConfig.ws_dkdv`` says so: the
16-bit configurations at D=64 and 128, where it measured 3-26% faster than the Triton kernel
(runs 113-114).

Gluon kernels do not run under ``TRITON_INTERPRET=1``: CI compiles this one for sm_90
(tests/backends/triton/test_compile_gluon_sm90.py); the GPU tests check it against the masked
reference and against the Triton kernel (tests/gpu/test_gluon_dkdv_gpu.py).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ...ir.semantics import KEY_SENTINEL as _KEY_SENTINEL
from .launch import LeanKernel, Site, lean_supported
from .versions import installed_triton

__all__ = ["GLUON_TRITON", "WsConfig", "gluon_reason", "launch", "launch_constants", "site", "unusable", "ws_config"]

# the Triton releases this kernel was written for and run on (3.7 and 3.8 compile it too, in CI
# and by hand, but nothing ran it there: they launch the Triton kernel instead; 3.9 does not compile it)
GLUON_TRITON: frozenset[tuple[int, int]] = frozenset({(3, 6)})


@dataclass(frozen=True)
class WsConfig:
    """Launch shape of the kernel: query tile rows, ring stages, the consumer's registers and
    the kernel's register cap (``maxnreg``: at 128, two blocks share an SM and the producer
    keeps 256 - ``regs`` registers a thread)."""

    block_m: int
    stages: int
    regs: int
    maxnreg: int


# per head dim (benchmarks/probe_gluon_bwd.py, run 113). D=128 takes 32-row query tiles: 64-row ones
# spill 60-189 times in the loop (--compile, Triton 3.6 and 3.7) and took 20.1-29.6 ms against
# 17.85 (QKDrop(0.7), 32k); 3 stages gained 1%, not taken. maxnreg 128 lets two blocks share an SM
_CONFIGS = {64: WsConfig(64, 2, 216, 128), 128: WsConfig(32, 2, 232, 128)}


def ws_config(head_dim: int) -> WsConfig | None:
    """The kernel's launch shape for ``head_dim``; None where it has none (the Triton kernel runs)."""
    return _CONFIGS.get(head_dim)


def unusable(q: torch.Tensor, block_k: int) -> str | None:
    """Why this kernel cannot take dK/dV of ``q``'s call on a CUDA device (None when it can)."""
    return _unusable_on(q.device.index if q.device.index is not None else torch.cuda.current_device(), q.dtype,
                        q.shape[-1], block_k)


@functools.cache
def _unusable_on(device: int, dtype: torch.dtype, head_dim: int, block_k: int) -> str | None:
    block = None if block_k == 64 else f"key blocks of {block_k} rows (the kernel takes 64)"
    return gluon_reason(device, dtype, head_dim, _CONFIGS, block)


def gluon_reason(device: int, dtype: torch.dtype, head_dim: int, configs: dict, block: str | None) -> str | None:
    """Why a Gluon kernel of this backend cannot run (None when it can): the GPU (Hopper), the dtype
    (fp16, bf16), the head dim (``configs``: the kernel's launch shapes by head dim), ``block`` (the
    kernel's own block-size reason, or None) and the Triton release."""
    cap = torch.cuda.get_device_capability(device)
    if cap != (9, 0):
        return f"GPU compute capability {cap} is not (9, 0) (Hopper)"
    if dtype not in (torch.float16, torch.bfloat16):
        return f"{dtype} (the kernel takes fp16 and bf16)"
    if head_dim not in configs:
        return f"head dim {head_dim} (the kernel takes {' and '.join(map(str, sorted(configs)))})"
    if block is not None:
        return block
    if installed_triton() not in GLUON_TRITON:
        return f"Triton {'.'.join(map(str, installed_triton()))} (the kernel is run on {sorted(GLUON_TRITON)} only)"
    return None


def launch(grid: tuple[int, int], args: tuple, *, head_dim: int, per_query_head: bool, max_seg: int,
           flags: dict, config: WsConfig | None = None) -> None:
    """dK/dV into ``args``' DK, DV: ``args`` are ``kernels._attn_bwd_dkdv``'s runtime arguments
    (through ``v_group``); ``flags`` its predicate and loop flags (op._flags); ``config`` another
    launch shape than ``ws_config(head_dim)`` (benchmarks/probe_gluon_bwd.py)."""
    constants = launch_constants(config or ws_config(head_dim), head_dim, per_query_head, max_seg, flags)
    _launcher().launch(grid, args, constants)


def site(grid: tuple[int, int], *, head_dim: int, per_query_head: bool, max_seg: int, flags: dict) -> Site:
    """The :class:`~.launch.Site` of :func:`launch`'s launches at ``grid`` (as gluon_dq.site)."""
    return Site(_launcher(), grid, launch_constants(ws_config(head_dim), head_dim, per_query_head, max_seg, flags))


def launch_constants(cfg: WsConfig, head_dim: int, per_query_head: bool, max_seg: int, flags: dict) -> dict:
    """The kernel's compile-time constants and launch options at launch shape ``cfg``."""
    return dict(
        DKV_PER_QUERY_HEAD=per_query_head, HEAD_DIM=head_dim, BLOCK_M=cfg.block_m, BLOCK_N=64, MAX_SEG=max_seg,
        **flags, STAGES=cfg.stages, COMPUTE_REGS=cfg.regs, num_warps=4, maxnreg=cfg.maxnreg,
    )  # fmt: skip


@functools.cache
def _launcher() -> LeanKernel:
    # Triton's lean path by hand: a Gluon kernel is a JITFunction subclass, which lean() leaves on
    # the normal path; its compiled kernel launches as a Triton one does (tests/gpu: bit for bit)
    return LeanKernel(_attn_bwd_dkdv_ws, enabled=lean_supported())


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

KEY_SENTINEL = gl.constexpr(_KEY_SENTINEL)


@gluon.jit
def _scheduled(HEAVY_FIRST: gl.constexpr, LAST_FIRST: gl.constexpr):
    """This program's block and (batch, group head): ``kernels._scheduled``'s order."""
    block = gl.program_id(0)
    bh = gl.program_id(1)
    if HEAVY_FIRST:
        n_blocks = gl.num_programs(0)
        n_bh = gl.num_programs(1)
        linear = block + bh * n_blocks
        block = linear // n_bh
        bh = linear % n_bh
        if LAST_FIRST:
            block = n_blocks - 1 - block
    return block, bh


@gluon.jit
def _tiles(rng, s, BLOCK: gl.constexpr, SINGLE_LOOP: gl.constexpr):
    """Segment ``s``'s query tiles as ``kernels._tiles`` makes them on the releases that fold a
    carried scalar (the previous segment's end read back): visit [lo, hi), unmasked [f0, f1)."""
    prev_hi = gl.cdiv(gl.load(rng + s * 4 - 1, mask=s > 0, other=0), BLOCK)
    lo = gl.maximum(gl.load(rng + s * 4) // BLOCK, prev_hi)
    hi = gl.maximum(gl.cdiv(gl.load(rng + s * 4 + 3), BLOCK), lo)
    f0 = gl.minimum(gl.maximum(gl.cdiv(gl.load(rng + s * 4 + 1), BLOCK), lo), hi)
    f1 = gl.minimum(gl.maximum(gl.load(rng + s * 4 + 2) // BLOCK, f0), hi)
    if SINGLE_LOOP:
        f0 = hi
        f1 = hi
    return lo, hi, f0, f1


@gluon.jit
def _keep(q_pos, k_pos, q_bkt, k_bkt, CAUSAL: gl.constexpr, STRICT: gl.constexpr, SAME_BUCKET: gl.constexpr,
          NOT_SELF: gl.constexpr):
    """``kernels._tile_keep`` over broadcast (keys x queries) positions and buckets, written again
    (a Gluon kernel cannot call a triton.jit function; test_dkdv_choice.py holds the two equal)."""
    if CAUSAL:
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


@gluon.jit
def _load(a, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
          SINGLE_LOOP: gl.constexpr, NW: gl.constexpr):
    """The producer partition: K and V rows of the key block, then Q and dO rows per query tile."""
    (k_smem, v_smem, q_smem, do_smem, kv_bar, ready, empty, q_base, do_base, k_base, v_base, dk_base, dv_base,
     q_order, q_posp, q_bktp, k_order, k_posp, k_bktp, lsep, deltap, rng, nseg, NONFINITE, stride_qt, stride_dot,
     stride_kt, stride_vt, stride_dkt, stride_dvt, seqlen, seqlen_k, qk_scale, sm_scale, n0) = a
    TPW_D: gl.constexpr = HEAD_DIM // 8
    ld: gl.constexpr = gl.BlockedLayout([1, 8], [32 // TPW_D, TPW_D], [NW, 1], [1, 0])
    offs_d = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, ld))
    offs_n = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, ld))
    n_ok = offs_n < seqlen_k
    k_rows = gl.load(k_order + offs_n, mask=n_ok, other=0).to(gl.int64)[:, None]
    # a dropped key's rows read as zeros, as in the Triton kernel
    kv_ok = (gl.load(k_posp + offs_n, mask=n_ok, other=KEY_SENTINEL) != KEY_SENTINEL)[:, None]
    async_copy.async_copy_global_to_shared(k_smem, k_base + k_rows * stride_kt + offs_d[None, :], mask=kv_ok)
    async_copy.async_copy_global_to_shared(v_smem, v_base + k_rows * stride_vt + offs_d[None, :], mask=kv_ok)
    async_copy.mbarrier_arrive(kv_bar, increment_count=False)
    offs_r = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, ld))
    c = 0
    for s in range(nseg):
        lo, hi, f0, f1 = _tiles(rng, s, BLOCK_M, SINGLE_LOOP)
        for m in range(lo, hi):
            stage = c % STAGES
            mbarrier.wait(empty.index(stage), ((c // STAGES) & 1) ^ 1)  # the consumer handed it back
            offs_m = m * BLOCK_M + offs_r
            m_ok = offs_m < seqlen
            r = gl.load(q_order + offs_m, mask=m_ok, other=0).to(gl.int64)[:, None]
            async_copy.async_copy_global_to_shared(q_smem.index(stage), q_base + r * stride_qt + offs_d[None, :],
                                                   mask=m_ok[:, None])
            async_copy.async_copy_global_to_shared(do_smem.index(stage), do_base + r * stride_dot + offs_d[None, :],
                                                   mask=m_ok[:, None])
            async_copy.mbarrier_arrive(ready.index(stage), increment_count=False)
            c += 1


@gluon.jit
def _compute(a, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
             SINGLE_LOOP: gl.constexpr, NW: gl.constexpr, CAUSAL: gl.constexpr, STRICT: gl.constexpr,
             SAME_BUCKET: gl.constexpr, NOT_SELF: gl.constexpr):
    """The consumer partition (one warpgroup): the products per query tile, then dK, dV."""
    (k_smem, v_smem, q_smem, do_smem, kv_bar, ready, empty, q_base, do_base, k_base, v_base, dk_base, dv_base,
     q_order, q_posp, q_bktp, k_order, k_posp, k_bktp, lsep, deltap, rng, nseg, NONFINITE, stride_qt, stride_dot,
     stride_kt, stride_vt, stride_dkt, stride_dvt, seqlen, seqlen_k, qk_scale, sm_scale, n0) = a
    s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                        instr_shape=[16, BLOCK_M, 16])
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                          instr_shape=[16, HEAD_DIM, 16])
    op_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
    dtype: gl.constexpr = k_smem.dtype
    offs_ns = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, s_layout))
    ns_ok = offs_ns < seqlen_k
    k_pos = gl.load(k_posp + offs_ns, mask=ns_ok, other=KEY_SENTINEL)
    k_bkt = k_pos
    if SAME_BUCKET:
        k_bkt = gl.load(k_bktp + offs_ns, mask=ns_ok, other=-2)
    dk = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, layout=acc_layout)
    dv = gl.zeros([BLOCK_N, HEAD_DIM], gl.float32, layout=acc_layout)
    s_zero = gl.zeros([BLOCK_N, BLOCK_M], gl.float32, layout=s_layout)
    offs_r = gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, s_layout))
    mbarrier.wait(kv_bar, 0)
    c = 0
    for s in range(nseg):
        lo, hi, f0, f1 = _tiles(rng, s, BLOCK_M, SINGLE_LOOP)
        for m in range(lo, hi):
            stage = c % STAGES
            offs_m = m * BLOCK_M + offs_r
            m_ok = offs_m < seqlen
            lse = gl.load(lsep + offs_m, mask=m_ok, other=float("inf"))
            di = gl.load(deltap + offs_m, mask=m_ok, other=0.0)
            mbarrier.wait(ready.index(stage), (c // STAGES) & 1)
            fence_async_shared()  # the copies landed through the generic proxy; the products read async
            q_st = q_smem.index(stage)
            do_st = do_smem.index(stage)
            s_tok = warpgroup_mma(k_smem, q_st.permute((1, 0)), s_zero, use_acc=False, is_async=True)
            dp_tok = warpgroup_mma(v_smem, do_st.permute((1, 0)), s_zero, use_acc=False, is_async=True)
            s_t = warpgroup_mma_wait(1, deps=(s_tok,))  # products complete in issue order
            p_t = gl.exp2(s_t * qk_scale - lse[None, :])
            if (m < f0) | (m >= f1):
                q_pos = gl.load(q_posp + offs_m, mask=m_ok, other=-1)
                q_bkt = q_pos
                if SAME_BUCKET:
                    q_bkt = gl.load(q_bktp + offs_m, mask=m_ok, other=-1)
                keep = _keep(q_pos[None, :], k_pos[:, None], q_bkt[None, :], k_bkt[:, None], CAUSAL, STRICT,
                             SAME_BUCKET, NOT_SELF)
                p_t = gl.where(keep, p_t, 0.0)
            dp_t = warpgroup_mma_wait(0, deps=(dp_tok,))
            ds_t = p_t * (dp_t - di[None, :])
            dv = warpgroup_mma(gl.convert_layout(p_t.to(dtype), op_layout), do_st, dv, is_async=True)
            dk = warpgroup_mma(gl.convert_layout(ds_t.to(dtype), op_layout), q_st, dk, is_async=True)
            dv, dk = warpgroup_mma_wait(0, deps=(dv, dk))
            mbarrier.arrive(empty.index(stage), count=1)
            c += 1
    # the dQ kernel flagged a value that is not finite: the sanitizing Triton variant writes
    # this call's dK, dV (nonfinite.py); otherwise flag one here, then store
    if gl.load(NONFINITE) == 0:
        offs_no = n0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, acc_layout))
        offs_do = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, acc_layout))
        no_ok = offs_no < seqlen_k
        out_ok = no_ok[:, None] & (offs_do[None, :] >= 0)
        rows = gl.sum(gl.where(out_ok, dk + dv, 0.0), 1)  # a sum holding an inf or NaN is not finite
        if gl.max(gl.where(gl.abs(rows) < float("inf"), 0, 1), 0) != 0:
            gl.store(NONFINITE, 1)
        k_rows = gl.load(k_order + offs_no, mask=no_ok, other=0).to(gl.int64)[:, None]
        gl.store(dk_base + k_rows * stride_dkt + offs_do[None, :], (dk * sm_scale).to(dk_base.dtype.element_ty),
                 mask=out_ok)
        gl.store(dv_base + k_rows * stride_dvt + offs_do[None, :], dv.to(dv_base.dtype.element_ty), mask=out_ok)


@gluon.jit
def _attn_bwd_dkdv_ws(Q, K, V, DO, DK, DV, LSE, DELTA,
          Q_ORDER, Q_POS, Q_BKT, K_ORDER, K_POS, K_BKT, RANGES, NSEG, HEAD_MAP, NONFINITE,
          stride_qb, stride_qh, stride_qt, stride_kb, stride_kh, stride_kt, stride_vb, stride_vh, stride_vt,
          stride_dob, stride_doh, stride_dot, stride_dkb, stride_dkh, stride_dkt, stride_dvb, stride_dvh, stride_dvt,
          n_heads_g, seqlen, seqlen_k, n_blocks, qk_scale, sm_scale, k_group, v_group,
          DKV_PER_QUERY_HEAD: gl.constexpr, HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
          MAX_SEG: gl.constexpr, CAUSAL: gl.constexpr, STRICT: gl.constexpr, SAME_BUCKET: gl.constexpr,
          NOT_SELF: gl.constexpr, SINGLE_LOOP: gl.constexpr, STAGES: gl.constexpr, COMPUTE_REGS: gl.constexpr,
          num_warps: gl.constexpr, HEAVY_FIRST: gl.constexpr = False):
    """One key block (BLOCK_N rows of the key layout) against its query-row ranges."""
    sm_layout: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)
    dtype: gl.constexpr = Q.dtype.element_ty
    pid_n, pid_bh = _scheduled(HEAVY_FIRST, False)
    b = pid_bh // n_heads_g
    hg = pid_bh % n_heads_g
    h = gl.load(HEAD_MAP + hg)
    if DKV_PER_QUERY_HEAD:
        dkv_head = hg
    else:
        dkv_head = h
    k_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], sm_layout)
    v_smem = gl.allocate_shared_memory(dtype, [BLOCK_N, HEAD_DIM], sm_layout)
    q_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], sm_layout)
    do_smem = gl.allocate_shared_memory(dtype, [STAGES, BLOCK_M, HEAD_DIM], sm_layout)
    kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    mbarrier.init(kv_bar, count=num_warps * 32)  # every producer thread's copies arrive
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=num_warps * 32)
        mbarrier.init(empty.index(i), count=1)
    row_base = pid_bh.to(gl.int64) * seqlen
    row_base_k = pid_bh.to(gl.int64) * seqlen_k
    a = (k_smem, v_smem, q_smem, do_smem, kv_bar, ready, empty,
         Q + b.to(gl.int64) * stride_qb + h.to(gl.int64) * stride_qh,
         DO + b.to(gl.int64) * stride_dob + hg.to(gl.int64) * stride_doh,
         K + b.to(gl.int64) * stride_kb + (h // k_group).to(gl.int64) * stride_kh,
         V + b.to(gl.int64) * stride_vb + (h // v_group).to(gl.int64) * stride_vh,
         DK + b.to(gl.int64) * stride_dkb + dkv_head.to(gl.int64) * stride_dkh,
         DV + b.to(gl.int64) * stride_dvb + dkv_head.to(gl.int64) * stride_dvh,
         Q_ORDER + row_base, Q_POS + row_base, Q_BKT + row_base,
         K_ORDER + row_base_k, K_POS + row_base_k, K_BKT + row_base_k,
         LSE + row_base, DELTA + row_base,
         RANGES + (pid_bh.to(gl.int64) * n_blocks + pid_n) * (MAX_SEG * 4),
         gl.load(NSEG + pid_bh.to(gl.int64) * n_blocks + pid_n), NONFINITE,
         stride_qt, stride_dot, stride_kt, stride_vt, stride_dkt, stride_dvt, seqlen, seqlen_k, qk_scale, sm_scale,
         pid_n * BLOCK_N)  # fmt: skip
    # the constexprs written out in each tuple: a tuple held in a variable turns them into tensors
    gl.warp_specialize([
        (_load, (a, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, SINGLE_LOOP, num_warps)),
        (_compute, (a, HEAD_DIM, BLOCK_M, BLOCK_N, STAGES, SINGLE_LOOP, num_warps, CAUSAL, STRICT, SAME_BUCKET,
                    NOT_SELF)),
    ], [4], [COMPUTE_REGS])  # fmt: skip
