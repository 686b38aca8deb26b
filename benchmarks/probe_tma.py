"""What K and V in layout order would buy the forward kernel: the same online-softmax tile loop
reading K and V three ways, timed against cuDNN on the same work.

The tile kernels read K and V rows through the layout's row order (a gather), so their loads
cannot use Hopper's tensor-memory accelerator (TMA). A variant over K and V copied once into
layout order could. This probe isolates that choice on dense, non-causal attention (every
tile full, no predicates): one query block of ``BLOCK_M`` rows per program, key tiles of
``BLOCK_N`` rows, and K, V read

- ``gather``: through a random permutation of each head's rows (what the kernels do);
- ``contiguous``: rows in order, plain pointer loads;
- ``tma``: rows in order through tensor descriptors made on the host (TMA loads);
- ``tma-device``: the same through descriptors the kernel makes (``tl.make_tensor_descriptor``);

and each of the three again with the tile loop warp-specialized (``-ws``: Triton's automatic
warp specialization, ``tl.range(..., warp_specialize=True)``: producer warps load, consumer
warps compute, the FlashAttention-3 split), which Triton 3.6 and newer apply on Hopper too.

Each row is the kernel's median time (``triton.testing.do_bench``) and its TFLOP/s, with SDPA
cuDNN and flash on the same q, k, v; the permutation's copy of K and V (what a layout-order
variant would pay per call) is timed too. ``--check`` compares every variant's output with SDPA.

    TRITON_INTERPRET=0 python3 benchmarks/probe_tma.py --out DIR
    TRITON_INTERPRET=1 python3 benchmarks/probe_tma.py --smoke   # CPU: the three variants agree
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

LOADS = {"gather": 0, "contiguous": 1, "tma": 2, "tma-device": 3}
# mode name -> (how K and V are read, warp-specialized loop)
MODES = {**{m: (i, False) for m, i in LOADS.items()}, **{f"{m}-ws": (i, True) for m, i in LOADS.items()}}


@triton.jit
def _fwd(Q, K, V, O, ORDER, K_DESC, V_DESC, T, qk_scale,
         MODE: tl.constexpr, WS: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    base = bh * T * D
    if MODE == 3:  # every load through a descriptor: what the warp-specialized loop needs on Hopper
        Q_DESC = tl.make_tensor_descriptor(Q + base, shape=[T, D], strides=[D, 1], block_shape=[BLOCK_M, D])
        q = Q_DESC.load([pid_m * BLOCK_M, 0])
    else:
        q = tl.load(Q + base + offs_m[:, None] * D + offs_d[None, :])
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    if MODE == 3:
        K_DESC = tl.make_tensor_descriptor(K + base, shape=[T, D], strides=[D, 1], block_shape=[BLOCK_N, D])
        V_DESC = tl.make_tensor_descriptor(V + base, shape=[T, D], strides=[D, 1], block_shape=[BLOCK_N, D])
    for n in tl.range(0, tl.cdiv(T, BLOCK_N), warp_specialize=WS):
        offs_n = n * BLOCK_N + tl.arange(0, BLOCK_N)
        if MODE == 0:
            rows = tl.load(ORDER + bh * T + offs_n)
            k = tl.load(K + base + rows[:, None] * D + offs_d[None, :])
        elif MODE == 1:
            k = tl.load(K + base + offs_n[:, None] * D + offs_d[None, :])
        elif MODE == 2:
            k = K_DESC.load([tl.program_id(1) * T + n * BLOCK_N, 0])  # int32 offsets
        else:
            k = K_DESC.load([n * BLOCK_N, 0])
        qk = tl.dot(q, tl.trans(k)) * qk_scale
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        if MODE == 0:
            v = tl.load(V + base + rows[:, None] * D + offs_d[None, :])
        elif MODE == 1:
            v = tl.load(V + base + offs_n[:, None] * D + offs_d[None, :])
        elif MODE == 2:
            v = V_DESC.load([tl.program_id(1) * T + n * BLOCK_N, 0])
        else:
            v = V_DESC.load([n * BLOCK_N, 0])
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    tl.store(O + base + offs_m[:, None] * D + offs_d[None, :], (acc / l_i[:, None]).to(O.dtype.element_ty))


def run_mode(mode: str, q, k, v, order, kp, vp, cfg):
    B, H, T, D = q.shape
    o = torch.empty_like(q)
    # gather reads k, v through ``order``; the others read the copies kp, vp already in that order
    load, ws = MODES[mode]
    kk, vv = (k, v) if load == LOADS["gather"] else (kp, vp)
    kd = TensorDescriptor.from_tensor(kk.view(B * H * T, D), [cfg.block_n, D])
    vd = TensorDescriptor.from_tensor(vv.view(B * H * T, D), [cfg.block_n, D])
    scale = D**-0.5 * 1.4426950408889634

    def call():
        return _fwd[(T // cfg.block_m, B * H)](q, kk, vv, o, order, kd, vd, T, scale, MODE=load, WS=ws, D=D,
                                          BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, num_warps=cfg.warps,
                                          num_stages=cfg.stages)  # fmt: skip

    compiled = call()
    # whether Triton did split the loop into producer and consumer warps (the interpreter compiles nothing)
    call.warp_specialized = "ttg.warp_specialize" in getattr(compiled, "asm", {}).get("ttgir", "")
    return o, call


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="folder for probe_tma.json")
    p.add_argument("--shape", default="1,32,8192,128", help="B,H,T,D (default: %(default)s)")
    p.add_argument("--configs", default="128,64,4,3;128,64,8,3;128,128,8,2;128,128,4,2;128,64,4,2",
                   help="BLOCK_M,BLOCK_N,warps,stages;...")
    p.add_argument("--smoke", action="store_true", help="CPU, tiny: the three variants agree with SDPA")
    args = p.parse_args()
    dev = torch.device("cpu" if args.smoke else "cuda")
    B, H, T, D = (2, 2, 64, 16) if args.smoke else (int(x) for x in args.shape.split(","))
    dtype = torch.float32 if args.smoke else torch.bfloat16
    if dev.type == "cuda":  # the scratch memory of descriptors made in a kernel
        triton.set_allocator(lambda size, alignment, stream: torch.empty(size, device=dev, dtype=torch.int8))
    g = torch.Generator(dev).manual_seed(0)
    q, k, v = (torch.randn(B, H, T, D, device=dev, generator=g).to(dtype) for _ in range(3))
    order = torch.stack([torch.randperm(T, device=dev, generator=g) for _ in range(B * H)]).to(torch.int32)
    idx = order.view(B, H, T, 1).long().expand(B, H, T, D)

    def copy():
        return k.gather(2, idx), v.gather(2, idx)

    kp, vp = copy()
    want = F.scaled_dot_product_attention(q, kp, vp)  # attention over the permuted keys is the same
    flops = 4 * B * H * T * T * D
    rows = []
    configs = [tuple(int(x) for x in c.split(",")) for c in args.configs.split(";")]
    if args.smoke:
        configs = [(32, 16, 1, 1)]
    for bm, bn, warps, stages in configs:
        cfg = argparse.Namespace(block_m=bm, block_n=bn, warps=warps, stages=stages)
        for mode in MODES:
            row = {"mode": mode, "block_m": bm, "block_n": bn, "warps": warps, "stages": stages}
            try:
                o, call = run_mode(mode, q, k, v, order, kp, vp, cfg)
                row["max_err"] = (o.float() - want.float()).abs().max().item()
                row["warp_specialized"] = call.warp_specialized
                if not args.smoke:
                    ms = triton.testing.do_bench(call, warmup=25, rep=200, return_mode="median")
                    row.update(ms=ms, tflops=flops / ms / 1e9)
            except Exception as e:  # noqa: BLE001 - a config that fails to compile is a result
                row["error"] = f"{type(e).__name__}: {e}"[:500]
            rows.append(row)
            print(row, flush=True)
    if not args.smoke:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        for name, backend in (("sdpa-cudnn", SDPBackend.CUDNN_ATTENTION), ("sdpa-flash", SDPBackend.FLASH_ATTENTION)):
            with sdpa_kernel(backend):
                ms = triton.testing.do_bench(lambda: F.scaled_dot_product_attention(q, kp, vp), warmup=25, rep=200,
                                             return_mode="median")  # fmt: skip
            rows.append({"mode": name, "ms": ms, "tflops": flops / ms / 1e9})
            print(rows[-1], flush=True)
        ms = triton.testing.do_bench(copy, warmup=10, rep=100, return_mode="median")
        rows.append({"mode": "copy K and V into layout order", "ms": ms})
        print(rows[-1], flush=True)
    bad = [r for r in rows if r.get("max_err", 0) > (1e-4 if args.smoke else 2e-2) or "error" in r]
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        res = {"device": torch.cuda.get_device_name() if dev.type == "cuda" else "cpu", "torch": torch.__version__,
               "triton": triton.__version__, "shape": [B, H, T, D], "dtype": str(dtype), "rows": rows}  # fmt: skip
        (Path(args.out) / "probe_tma.json").write_text(json.dumps(res, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
