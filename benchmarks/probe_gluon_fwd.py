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

Compile for sm_90 without a GPU (registers, spills, shared memory):

    python benchmarks/probe_gluon_fwd.py --compile

On a GPU, against the Triton forward on the same prepared group (outputs compared) and cuDNN:

    python3 benchmarks/probe_gluon_fwd.py --out DIR [--shapes 1,32,8,128,16384] [--patterns keep0.7]

Gluon kernels run compiled only (not under ``TRITON_INTERPRET=1``). What runs 105 and 106
measured, and why the backend does not use it: docs/kernels.md, "The forward written in Gluon".
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    async_copy,
    fence_async_shared,
    warpgroup_mma,
    warpgroup_mma_init,
    warpgroup_mma_wait,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
from tilesparse.backends.triton.op import LOG2E  # noqa: E402
from tilesparse.backends.triton.sm90 import _signature, report  # noqa: E402


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


def compile_sm90(head_dim: int, block_n: int, stages: int, overlap: bool, max_seg: int = 1, num_warps: int = 8):
    """Compile the probe kernel for sm_90 without a GPU; returns Triton's compiled kernel."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    const = {"HEAD_DIM": head_dim, "BLOCK_M": 128, "BLOCK_N": block_n, "MAX_SEG": max_seg, "STAGES": stages,
             "OVERLAP": overlap, "num_warps": num_warps}
    sig = _signature(_gl_fwd, "bf16", const)
    # what a launch specializes on: 16-byte aligned tensors, strides that are multiples of 16
    attrs = {(i,): [["tt.divisibility", 16]] for i, nm in enumerate(_gl_fwd.arg_names)
             if sig[nm].startswith("*") or nm.startswith("stride_")}
    src = GluonASTSource(_gl_fwd, sig, const, attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=num_warps))


def gl_forward(q, k, v, g, scale: float, block_n: int, stages: int, overlap: bool, num_warps: int = 8):
    """O and LSE of prepared group ``g`` by the probe kernel (layout as the Triton forward's)."""
    B, H, T, D = q.shape
    Tk = k.shape[2]
    Hg = len(g.heads)
    o = torch.empty((B, Hg, T, D), dtype=q.dtype, device=q.device)
    lse = torch.empty((B, Hg, T), dtype=torch.float32, device=q.device)
    n_blocks = g.q_ranges.shape[2]
    assert g.block_q == 128, g.block_q
    _gl_fwd[(n_blocks, B * Hg)](
        q, k, v, o, lse, g.q_order, g.q_pos, g.k_order, g.k_pos, g.q_ranges, g.q_nseg, g.head_map,
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3],
        Hg, T, Tk, n_blocks, scale * LOG2E, H // k.shape[1], H // v.shape[1],
        HEAD_DIM=D, BLOCK_M=128, BLOCK_N=block_n, MAX_SEG=g.q_ranges.shape[3], STAGES=stages, OVERLAP=overlap,
        num_warps=num_warps,
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
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--compile", action="store_true", help="compile for sm_90 only (no GPU), print registers")
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default="1,32,8,128,16384;1,32,8,128,32768")
    ap.add_argument("--patterns", default="keep0.7,keep0.5")
    ap.add_argument("--variants", default="64:2:0,64:3:0,64:3:1,64:4:1,128:2:0,128:3:1",
                    help="BLOCK_N:STAGES:OVERLAP[:WARPS],...")  # fmt: skip
    ap.add_argument("--tag", default="probe_gluon_fwd")
    args = ap.parse_args()
    if args.compile:
        return _compile_report()

    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from bench_models import PATTERNS, bf16_inputs, gpu_ms, run_header

    import tilesparse as ts
    from tilesparse.backends.triton.op import forward_tile, launch_fwd, tile_config
    from tilesparse.ir import tile_stats

    dev = torch.device("cuda")
    res = run_header(rows=[])
    t0 = time.time()

    def write() -> None:  # after every row: a run cut short keeps what it measured
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / f"{args.tag}.json").write_text(json.dumps(res, indent=1, default=str))

    for shape in args.shapes.split(";"):
        (B, H, Hkv, D, T), q, k, v, _ = bf16_inputs(shape)
        q, k, v = (t.detach() for t in (q, k, v))
        causal = T * (T + 1) // 2 * B * H * 4 * D
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION), torch.no_grad():
            cudnn = gpu_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != H))
        row = {"shape": [B, H, Hkv, D, T], "name": "cudnn", "fwd_ms": cudnn, "tflops": causal / cudnn / 1e9}
        res["rows"].append(row)
        for pname in args.patterns.split(","):
            attn = ts.compile(PATTERNS[pname], causal=True, backend="triton")
            dec = attn.decide(q, k, generator=torch.Generator(dev).manual_seed(1))
            g = attn.prepare(q, k, v, decisions=dec).groups[0]
            cfg = tile_config(D, torch.bfloat16, dev)
            scale = D**-0.5
            o_ref = torch.empty((B, len(g.heads), T, D), dtype=q.dtype, device=dev)
            lse_ref = torch.empty((B, len(g.heads), T), dtype=torch.float32, device=dev)
            # its first call fills o_ref and lse_ref
            tri = gpu_ms(lambda: launch_fwd(q, k, v, o_ref, lse_ref, g, scale, cfg))  # noqa: B023
            bn_tri = forward_tile(g.group, cfg)
            vis = tile_stats(g, block_n=bn_tri, exact=False)["visited"] * cfg.block_q * bn_tri
            row = {"shape": [B, H, Hkv, D, T], "name": f"{pname} triton", "fwd_ms": tri,
                   "tflops": 4 * D * vis / tri / 1e9, "block_n": bn_tri}  # fmt: skip
            res["rows"].append(row)
            print(f"[{time.time() - t0:.0f}s] {row}", file=sys.stderr, flush=True)
            for var in args.variants.split(","):
                bn, st, ov, w = (int(x) for x in (var + ":8").split(":")[:4])
                row = {"shape": [B, H, Hkv, D, T], "name": f"{pname} gluon n{bn} s{st} ov{ov} w{w}"}
                try:
                    o, lse = gl_forward(q, k, v, g, scale, bn, st, bool(ov), w)
                    torch.cuda.synchronize()
                    fin = torch.isfinite(lse_ref)
                    row["max_diff_o"] = float((o.float() - o_ref.float()).abs().max())
                    row["max_diff_lse"] = float((lse[fin] - lse_ref[fin]).abs().max()) if fin.any() else 0.0
                    row["lse_inf_match"] = bool(torch.equal(torch.isinf(lse), torch.isinf(lse_ref)))
                    ms = gpu_ms(lambda: gl_forward(q, k, v, g, scale, bn, st, bool(ov), w))  # noqa: B023
                    vis_g = tile_stats(g, block_n=bn, exact=False)["visited"] * 128 * bn
                    row.update(fwd_ms=ms, tflops=4 * D * vis_g / ms / 1e9, vs_triton=tri / ms)
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
            print(f"{r['shape']} {r['name']:32s} {r['fwd_ms']:.3f} ms {r['tflops']:.0f} TF/s{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
