"""Probe: the warp-specialized dK/dV kernel (tilesparse/backends/triton/gluon_dkdv.py) at launch
shapes of its own, against the Triton dK/dV kernel on the same inputs.

The backward is where the D=128 targets are furthest off, and the dK/dV kernel is most of it
(19 of QKDrop(0.7)'s 31 ms of backward at B=1, H=32, Hkv=8, T=32,768; docs/kernels.md, the
profile of run 77). Both kernels run from one prepared group, forward output and delta, into
fp32 buffers per query head (the GQA buffers the backend sums into the kv heads); each row
records the largest difference of the Gluon kernel's dK and dV from the Triton kernel's, and each
kernel's time two ways: back to back (``ms``) and synchronized after every call (``sync_ms``;
the gap is host time).

Compile every launch shape for sm_90 without a GPU (spills, shared memory):

    python benchmarks/probe_gluon_bwd.py --compile

On a GPU:

    python3 benchmarks/probe_gluon_bwd.py --out DIR [--shapes 1,32,8,128,16384] [--patterns keep0.7] \
        [--variants BLOCK_M:STAGES:CONSUMER_REGS:MAXNREG,...]
"""

from __future__ import annotations

import functools
import itertools
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_models import probe_args  # noqa: E402

from tilesparse.backends.triton.gluon_dkdv import WsConfig  # noqa: E402
from tilesparse.backends.triton.nonfinite import new_flag  # noqa: E402
from tilesparse.backends.triton.op import LOG2E  # noqa: E402
from tilesparse.backends.triton.sm90 import DROP_CAUSAL, compile_gluon_dkdv, report  # noqa: E402


def _compile_report() -> int:
    for d, bm, st, (regs, maxnreg) in itertools.product((128, 64), (64, 32), (2, 3), ((216, 128), (240, 255))):
        try:
            r = report(compile_gluon_dkdv(torch.bfloat16, d, DROP_CAUSAL, True, False, WsConfig(bm, st, regs, maxnreg)))
            print(f"D={d} BLOCK_M={bm} STAGES={st} consumer {regs} registers (maxnreg {maxnreg}): "
                  f"stack {r.stack} loop spills {r.loop_spills} shared {r.shared}")  # fmt: skip
        except Exception as e:  # noqa: BLE001 - report and go on
            print(f"D={d} BLOCK_M={bm} STAGES={st} {regs}/{maxnreg}: FAILED {type(e).__name__}: {str(e)[-1500:]}")
    return 0


def _dkdv_args(q, k, v, do, dk, dv, lse, delta, g, scale: float) -> tuple:
    """kernels._attn_bwd_dkdv's runtime arguments for prepared group ``g``, which the Gluon
    kernel takes too (its flag zeroed: the dQ kernel flagged nothing)."""
    H, T, Tk = q.shape[1], q.shape[2], k.shape[2]
    return (
        q, k, v, do, dk, dv, lse, delta, g.q_order, g.q_pos, g.q_bucket, g.k_order, g.k_pos, g.k_bucket, g.k_ranges,
        g.k_nseg, g.head_map, new_flag(q.device), *q.stride()[:3], *k.stride()[:3], *v.stride()[:3],
        *do.stride()[:3], *dk.stride()[:3], *dv.stride()[:3], len(g.heads), T, Tk, g.k_ranges.shape[2],
        scale * LOG2E, scale, H // k.shape[1], H // v.shape[1],
    )  # fmt: skip


def main() -> int:
    args = probe_args("probe_gluon_bwd", "64:2:216:128,32:2:232:128,32:3:232:128,64:2:240:255",
                      "BLOCK_M:STAGES:CONSUMER_REGS:MAXNREG,...")
    if args.compile:
        return _compile_report()

    from bench_models import bf16_inputs, probe_group, probe_results, timed

    from tilesparse.backends.triton import gluon_dkdv, kernels
    from tilesparse.backends.triton.nonfinite import launch_pair
    from tilesparse.backends.triton.op import _block_d, _flags, _precision, dp_first, launch_fwd

    dev = torch.device("cuda")
    res, write = probe_results(args)
    t0 = time.time()

    for shape in args.shapes.split(";"):
        (B, H, Hkv, D, T), q, k, v, do = bf16_inputs(shape)
        q, k, v = (t.detach() for t in (q, k, v))
        for pname in args.patterns.split(","):
            g, cfg = probe_group(pname, q, k, v)
            scale = D**-0.5
            Hg = len(g.heads)
            o = torch.empty((B, Hg, T, D), dtype=q.dtype, device=dev)
            lse = torch.empty((B, Hg, T), dtype=torch.float32, device=dev)
            launch_fwd(q, k, v, o, lse, g, scale, cfg)
            # delta from the dQ kernel, as the backward computes it (its dq is not used here)
            flags = _flags(g, cfg)
            common = dict(HEAD_DIM=D, BLOCK_D=_block_d(D), PRECISION=_precision(q.dtype))
            delta = torch.empty((B, Hg, T), dtype=torch.float32, device=dev)
            dq = torch.zeros_like(q)
            n_qb = g.q_ranges.shape[2]
            launch_pair(
                kernels._attn_bwd_dq, (n_qb, B * Hg), q, k, v, o, do, dq, lse, delta,
                g.q_order, g.q_pos, g.q_bucket, g.k_order, g.k_pos, g.k_bucket, g.q_ranges, g.q_nseg, g.head_map,
                new_flag(dev), *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *o.stride()[:3], *do.stride()[:3],
                *dq.stride()[:3], Hg, T, T, n_qb, scale * LOG2E, scale, H // Hkv, H // Hkv,
                BLOCK_M=cfg.block_q, BLOCK_N=cfg.dq_n, MAX_SEG=g.q_ranges.shape[3], num_warps=cfg.dq_warps,
                num_stages=cfg.dq_stages, **common, **flags,
            )  # fmt: skip
            dk_ref = torch.zeros((B, Hg, T, D), dtype=torch.float32, device=dev)
            dv_ref = torch.zeros_like(dk_ref)
            n_kb = g.k_ranges.shape[2]

            tri = functools.partial(
                launch_pair, kernels._attn_bwd_dkdv, (n_kb, B * Hg),
                *_dkdv_args(q, k, v, do, dk_ref, dv_ref, lse, delta, g, scale),
                DKV_PER_QUERY_HEAD=True, BLOCK_M=cfg.dkdv_m, BLOCK_N=cfg.block_k, MAX_SEG=g.k_ranges.shape[3],
                DP_FIRST=dp_first(cfg, flags["SINGLE_LOOP"]), num_warps=cfg.bwd_warps, num_stages=cfg.bwd_stages,
                **common, **flags,
            )  # fmt: skip
            t = timed(tri)
            tri_ms = t["ms"]
            row = {"shape": [B, H, Hkv, D, T], "name": f"{pname} triton dkdv", **t, "block": [cfg.block_k, cfg.dkdv_m]}
            res["rows"].append(row)
            print(f"[{time.time() - t0:.0f}s] {row}", file=sys.stderr, flush=True)
            ref_scale = float(dk_ref.abs().max()), float(dv_ref.abs().max())
            for var in args.variants.split(","):
                bm, st, regs, maxnreg = (int(x) for x in var.split(":"))
                row = {"shape": [B, H, Hkv, D, T], "name": f"{pname} gluon-ws dkdv m{bm} s{st} r{regs}/{maxnreg}",
                       "config": [bm, st, regs, maxnreg]}  # fmt: skip
                try:
                    dk = torch.full_like(dk_ref, float("nan"))
                    dv = torch.full_like(dv_ref, float("nan"))
                    run = functools.partial(
                        gluon_dkdv.launch, (n_kb, B * Hg), _dkdv_args(q, k, v, do, dk, dv, lse, delta, g, scale),
                        head_dim=D, per_query_head=True, max_seg=g.k_ranges.shape[3], flags=flags,
                        config=WsConfig(bm, st, regs, maxnreg),
                    )  # fmt: skip
                    run()
                    torch.cuda.synchronize()
                    row["max_diff_dk"] = float((dk - dk_ref).abs().max())
                    row["max_diff_dv"] = float((dv - dv_ref).abs().max())
                    row["max_dk"], row["max_dv"] = ref_scale
                    t = timed(run)
                    row.update(t, vs_triton=tri_ms / t["ms"])
                except Exception as e:  # noqa: BLE001 - a variant that fails to compile or run
                    row["error"] = repr(e)[:600]
                res["rows"].append(row)
                print(f"[{time.time() - t0:.0f}s] {row}", file=sys.stderr, flush=True)
                write()
        del q, k, v, do
        torch.cuda.empty_cache()
    write()
    for r in res["rows"]:
        if "error" in r:
            print(f"{r['shape']} {r['name']:40s} ERROR {r['error'][:200]}")
        else:
            extra = (f" diff dk {r['max_diff_dk']:.2e} (max {r['max_dk']:.2e}) dv {r['max_diff_dv']:.2e} "
                     f"(max {r['max_dv']:.2e})") if "max_diff_dk" in r else ""  # fmt: skip
            print(f"{r['shape']} {r['name']:40s} {r['ms']:.3f} ms ({r['sync_ms']:.3f} synchronized){extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
