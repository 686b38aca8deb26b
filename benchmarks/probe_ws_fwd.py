"""What a warp-specialized forward over rows copied into layout order would buy a real pattern.

``probe_tma.py`` found the plain forward tile loop at 0.78x cuDNN however K and V are read, and
0.90x when the loop reads through descriptors made in the kernel and Triton splits it into
producer and consumer warps (``tl.range(..., warp_specialize=True)``). That split needs every
load the loop depends on to go through a tensor descriptor, so it cannot gather rows: it needs
Q, K and V copied into the layout's row order first (per query head), and the positions read
through descriptors too. This probe builds that forward for a pattern with one segment per
query block (QKDrop, Dense), on the op's own index tensors:

- ``copy``: Q, K and V gathered into layout order (torch ``gather``; K and V per query head);
- ``ws``: the warp-specialized forward over the copies (causal, the keep predicate by
  positions, full tiles unmasked as the kernels do), 128x128 tiles, 4 warps, 2 stages;
- ``plain``: the same kernel with the split off (``warp_specialize=False``);
- ``kernel``: the backend's forward kernel (``op.launch_fwd``, its launch pair) on the same
  index tensors,

each ``triton.testing.do_bench``'s median, with the outputs' max difference from the kernel's
and effective TFLOP/s over the visited 128x128 tiles; cuDNN's dense causal forward for scale.

    TRITON_INTERPRET=0 python3 benchmarks/probe_ws_fwd.py --out DIR
    TRITON_INTERPRET=1 python3 benchmarks/probe_ws_fwd.py --smoke   # CPU: agrees with the kernel
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import tilesparse as ts  # noqa: E402
from tilesparse.backends.triton import op  # noqa: E402


@triton.jit
def _fwd_layout(QL, KL, VL, Q_POS, K_POS, O, LSE, Q_ORDER, RANGES,
                n_heads_g, seqlen_q, seqlen_k, n_blocks, qk_scale, stride_ob, stride_oh, stride_ot,
                D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, RANGE_ROWS: tl.constexpr,
                WS: tl.constexpr, POS: tl.constexpr):
    """One query block of one (batch, group head) over its single segment's key tiles; every
    load the tile loop depends on goes through a descriptor (QL, KL, VL: rows in layout order,
    (B * Hg * T, D); Q_POS, K_POS: (B * Hg, T) int32)."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads_g
    hg = pid_bh % n_heads_g
    n_bh = tl.num_programs(1)
    q_desc = tl.make_tensor_descriptor(QL, shape=[n_bh * seqlen_q, D], strides=[D, 1], block_shape=[BLOCK_M, D])
    k_desc = tl.make_tensor_descriptor(KL, shape=[n_bh * seqlen_k, D], strides=[D, 1], block_shape=[BLOCK_N, D])
    v_desc = tl.make_tensor_descriptor(VL, shape=[n_bh * seqlen_k, D], strides=[D, 1], block_shape=[BLOCK_N, D])
    qp_desc = tl.make_tensor_descriptor(Q_POS, shape=[n_bh, seqlen_q], strides=[seqlen_q, 1], block_shape=[1, BLOCK_M])
    kp_desc = tl.make_tensor_descriptor(K_POS, shape=[n_bh, seqlen_k], strides=[seqlen_k, 1], block_shape=[1, BLOCK_N])
    row_q = pid_bh * seqlen_q
    row_k = pid_bh * seqlen_k
    q = q_desc.load([row_q + pid_m * BLOCK_M, 0])
    if POS:
        q_pos = tl.reshape(qp_desc.load([pid_bh, pid_m * BLOCK_M]), [BLOCK_M])
    else:  # positions are the layout rows (the identity layout: Dense only)
        q_pos = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    # the block's query-block ranges are in rows of the op's blocks (RANGE_ROWS each)
    rng = RANGES + (pid_bh.to(tl.int64) * n_blocks + pid_m * (BLOCK_M // RANGE_ROWS)) * 4
    lo = tl.load(rng) // BLOCK_N
    f0 = tl.cdiv(tl.load(rng + 1), BLOCK_N)
    f1 = tl.load(rng + 2) // BLOCK_N
    hi = tl.cdiv(tl.load(rng + 3), BLOCK_N)
    f0 = tl.minimum(tl.maximum(f0, lo), hi)
    f1 = tl.minimum(tl.maximum(f1, f0), hi)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    for n in tl.range(lo, hi, warp_specialize=WS):
        k = k_desc.load([row_k + n * BLOCK_N, 0])
        qk = tl.dot(q, k.T) * qk_scale
        offs_n = n * BLOCK_N + tl.arange(0, BLOCK_N)
        if POS:
            k_pos = tl.reshape(kp_desc.load([pid_bh, n * BLOCK_N]), [BLOCK_N])
        else:
            k_pos = offs_n
        keep = ((k_pos[None, :] <= q_pos[:, None]) & (offs_n[None, :] < seqlen_k)) | ((n >= f0) & (n < f1))
        qk = tl.where(keep, qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(qk - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = v_desc.load([row_k + n * BLOCK_N, 0])
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = offs_m < seqlen_q
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    tl.store(LSE + row_q + offs_m, tl.where(empty, float("inf"), m_i + tl.math.log2(l_safe)), mask=m_ok)
    q_rows = tl.load(Q_ORDER + row_q + offs_m, mask=m_ok, other=0)
    offs_d = tl.arange(0, D)
    o_base = O + b.to(tl.int64) * stride_ob + hg.to(tl.int64) * stride_oh
    tl.store(o_base + q_rows[:, None] * stride_ot + offs_d[None, :], (acc / l_safe[:, None]).to(O.dtype.element_ty),
             mask=m_ok[:, None])  # fmt: skip


def layout_copies(q, k, v, g):
    """Q (per group head) and K, V (per query head) gathered into the layout's row order."""
    B, H, T, D = q.shape
    group = H // k.shape[1]
    qh = q.index_select(1, g.head_map.long())
    kh, vh = (t.index_select(1, (g.head_map // group).long()) for t in (k, v))
    qi = g.q_order.long().unsqueeze(-1).expand(-1, -1, -1, D)
    ki = g.k_order.long().unsqueeze(-1).expand(-1, -1, -1, D)
    return qh.gather(2, qi), kh.gather(2, ki), vh.gather(2, ki)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="folder for probe_ws_fwd.json")
    p.add_argument("--shapes", default="1x32x8x128x16384,1x32x8x128x32768", help="BxHxHkvxDxT,...")
    p.add_argument("--keeps", default="0.7,0.5,1.0", help="QKDrop keep fractions (1.0: Dense on Triton)")
    p.add_argument("--variants", default="ws,plain",
                   help="the probe kernel's variants to run, the first checked: ws, plain, and ws-nopos / plain-nopos "
                        "(positions taken as the layout rows: right for Dense only)")  # fmt: skip
    p.add_argument("--smoke", action="store_true", help="CPU, tiny: the probe's kernel agrees with the backend's")
    args = p.parse_args()
    dev = torch.device("cpu" if args.smoke else "cuda")
    if dev.type == "cuda":
        triton.set_allocator(lambda size, alignment, stream: torch.empty(size, device=dev, dtype=torch.int8))
    shapes = ["1x2x1x16x64"] if args.smoke else args.shapes.split(",")
    rows = []
    for shape in shapes:
        B, H, Hkv, D, T = (int(x) for x in shape.split("x"))
        dtype = torch.float32 if args.smoke else torch.bfloat16
        g0 = torch.Generator(dev).manual_seed(0)
        q = torch.randn(B, H, T, D, device=dev, generator=g0).to(dtype)
        k, v = (torch.randn(B, Hkv, T, D, device=dev, generator=g0).to(dtype) for _ in range(2))
        for keep in (float(x) for x in args.keeps.split(",")):
            spec = ts.Dense() if keep == 1.0 else ts.QKDrop(keep=keep)
            attn = ts.compile(spec, causal=True, backend="triton")
            dec = attn.decide(q, k, generator=torch.Generator(dev).manual_seed(1))
            (g,) = attn.prepare(q, k, v, decisions=dec).groups
            cfg = op.tile_config(D, dtype, dev)
            row = {"shape": shape, "spec": str(spec), "max_segments": g.q_ranges.shape[3]}
            if g.q_ranges.shape[3] != 1 or int(g.q_nseg.max()) > 1:
                row["skipped"] = "more than one segment per block"
                rows.append(row)
                continue
            Hg, scale = len(g.heads), D**-0.5
            o_ref = torch.empty(B, Hg, T, D, device=dev, dtype=dtype)
            lse_ref = torch.empty(B, Hg, T, device=dev, dtype=torch.float32)

            def kernel():
                op.launch_fwd(q, k, v, o_ref, lse_ref, g, scale, cfg)

            kernel()
            ql, kl, vl = layout_copies(q, k, v, g)
            block = 32 if args.smoke else 128
            o = torch.zeros_like(o_ref)
            lse = torch.empty_like(lse_ref)
            qpos, kpos = g.q_pos.contiguous(), g.k_pos.contiguous()

            def run(ws):
                def call():
                    _fwd_layout[(triton.cdiv(T, block), B * Hg)](
                        ql, kl, vl, qpos, kpos, o, lse, g.q_order, g.q_ranges, Hg, T, T, g.q_ranges.shape[2],
                        scale * 1.4426950408889634, *o.stride()[:3], D=D, BLOCK_M=block, BLOCK_N=block,
                        RANGE_ROWS=g.block_q, WS=ws.startswith("ws"), POS=not ws.endswith("nopos"),
                        num_warps=1 if args.smoke else 4, num_stages=2,
                    )  # fmt: skip

                return call

            variants = args.variants.split(",")
            run(variants[0])()
            row["checked"] = variants[0]
            row["max_err_vs_kernel"] = (o.float() - o_ref.float()).abs().max().item()
            row["out_max"] = o_ref.float().abs().max().item()
            row["max_lse_err_vs_kernel"] = (lse - lse_ref).abs().nan_to_num(0.0, 0.0, 0.0).max().item()
            if not args.smoke:
                bench = lambda f: triton.testing.do_bench(f, warmup=25, rep=200, return_mode="median")  # noqa: E731
                row["kernel_ms"] = bench(kernel)
                row["copy_ms"] = bench(lambda: layout_copies(q, k, v, g))
                for name in variants:
                    row[f"{name}_ms"] = bench(run(name))
                # visited 128x128 tiles: every tile of every block's [lo, hi)
                r = g.q_ranges[..., 0, :].long()
                lo, hi = r[..., 0] // 128, (r[..., 3] + 127) // 128
                tiles = int((hi - lo).clamp_min(0)[..., ::128 // g.block_q].sum()) if g.block_q <= 128 else 0
                flops = 4 * tiles * 128 * 128 * D
                row["visited_tiles_128"] = tiles
                row.update({f"{n}_tflops": flops / row[f"{n}_ms"] / 1e9 for n in ("kernel", *variants)})
                with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
                    row["cudnn_dense_ms"] = bench(
                        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
                    )
                row["cudnn_dense_tflops"] = 2 * B * H * T * T * D / row["cudnn_dense_ms"] / 1e9
            rows.append(row)
            print({kk: round(vv, 4) if isinstance(vv, float) else vv for kk, vv in row.items()}, flush=True)
    bad = [r for r in rows if r.get("max_err_vs_kernel", 0) > (1e-4 if args.smoke else 2e-2)]
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        meta = {"device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "torch": torch.__version__,
                "triton": triton.__version__, "cmd": " ".join(["benchmarks/probe_ws_fwd.py", *sys.argv[1:]])}  # fmt: skip
        (Path(args.out) / "probe_ws_fwd.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
