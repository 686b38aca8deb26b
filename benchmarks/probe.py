"""A short device probe: where the time goes for the target rows, and which tile config wins.

Run on the H200 (python3 benchmarks/probe.py --out DIR). For B=2, H=12, D=64 (and 128), bf16,
T=16,384 it times, each with triton.testing.do_bench (median; warm-up and compilation
excluded): SDPA flash and cuDNN fwd+bwd; ours fwd and fwd+bwd per pattern with decisions given;
the prepare stage alone; the decide stage alone; and a sweep of tile configs on Hash(16). Writes
probe.json under DIR and prints a table last.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from torch.nn.attention import SDPBackend, sdpa_kernel

import tilesparse as ts
from tilesparse.backends.triton.op import override_config, sparse_attention, tile_config
from tilesparse.bench.attention import forward_tiles, tile_area

B, H = 2, 12
DEV = torch.device("cuda")


def bench(fn, warmup=10, rep=60) -> float:
    fn()
    torch.cuda.synchronize()
    return triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")


def inputs(T, D):
    q, k, v = (torch.randn((B, H, T, D), device=DEV, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    return q, k, v, torch.randn((B, H, T, D), device=DEV, dtype=torch.bfloat16)


def fwd_bwd(f, q, k, v, go):
    def run():
        out = f()
        torch.autograd.grad(out, (q, k, v), go)

    return run


def sdpa_rows(T, D):
    q, k, v, go = inputs(T, D)
    out = {}
    for name, backend in (("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
        try:
            with sdpa_kernel(backend):
                f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
                out[name] = {"fwd": bench(f), "fwd_bwd": bench(fwd_bwd(f, q, k, v, go))}
        except Exception as e:  # noqa: BLE001 - record and go on
            out[name] = {"error": repr(e)[:300]}
    return out


def ours(spec, T, D, backend="triton"):
    q, k, v, go = inputs(T, D)
    attn = ts.compile(spec, causal=True, backend=backend)
    dec = attn.decide(q, k)
    f = lambda: attn(q, k, v, decisions=dec)  # noqa: E731
    row = {"spec": str(spec), "T": T, "D": D}
    row["fwd"] = bench(f)
    row["fwd_bwd"] = bench(fwd_bwd(f, q, k, v, go))
    row["prepare"] = bench(lambda: attn.prepare(q, k, v, decisions=dec))
    row["decide"] = bench(lambda: attn.decide(q, k))
    row["fwd_bwd_with_decide"] = bench(fwd_bwd(lambda: attn(q, k, v), q, k, v, go))
    cfg = tile_config(D, torch.bfloat16, DEV)
    prep = attn.prepare(q, k, v, decisions=dec)
    if backend == "triton" and len(prep.groups) == 1:
        g = prep.groups[0]
        kern = lambda: sparse_attention(q, k, v, g, D**-0.5, cfg)  # noqa: E731
        row["kernel_fwd"] = bench(kern)
        row["kernel_fwd_bwd"] = bench(fwd_bwd(kern, q, k, v, go))
    tiles = forward_tiles(prep.groups, cfg)
    row["visited_fraction"] = tile_area(tiles, "visited") / max(1, tile_area(tiles, "dense_tiles"))
    row["unmasked_fraction"] = tile_area(tiles, "unmasked") / max(1, tile_area(tiles, "visited"))
    # correctness on this very input, against the reference on one (b, h) slice
    with torch.no_grad():
        o = f()
        sl = lambda t: t[:1, :1].detach()  # noqa: E731
        d1 = ts.Decisions(**{n: None if t is None else t[:1, :1] for n, t in dec.items()})
        ref = attn.reference(sl(q), sl(k), sl(v), decisions=d1)
        row["max_err_vs_ref"] = float((o[:1, :1].float() - ref).abs().max())
    torch.cuda.reset_peak_memory_stats()
    fwd_bwd(f, q, k, v, go)()
    row["peak_mib"] = torch.cuda.max_memory_allocated() / 2**20
    return row


SWEEP = [
    dict(fwd_warps=4),
    dict(fwd_n=32),
    dict(block_q=64, fwd_n=64, fwd_warps=4),
    dict(fwd_stages=2),
    dict(block_k=64, dkdv_m=64),
    dict(dkdv_m=64),
    dict(bwd_warps=4),
    dict(dq_n=64),
    dict(bwd_stages=2),
]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--T", type=int, default=16384)
    ap.add_argument("--dims", default="64")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--sweep-only", action="store_true", help="skip the per-pattern rows and SDPA")
    ap.add_argument("--sweep-json", help='configs to sweep instead of SWEEP, e.g. \'[{"block_k": 64}]\'')
    args = ap.parse_args()
    t0 = time.time()
    res = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
           "cmd": " ".join(sys.argv), "B": B, "H": H, "rows": [], "sdpa": {}, "sweep": []}  # fmt: skip
    specs = [
        ts.Hash(buckets=16),
        ts.QKDrop(keep=0.5),
        ts.QKDrop(keep=0.3),
        ts.QKDrop(keep=0.7),
        ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)]),
        ts.Dense(),
    ]
    sweep = json.loads(args.sweep_json) if args.sweep_json else SWEEP
    for D in map(int, args.dims.split(",")):
        if args.sweep_only:
            specs = []
        else:
            res["sdpa"][D] = sdpa_rows(args.T, D)
            print(f"[{time.time() - t0:.0f}s] sdpa D={D}: {res['sdpa'][D]}", file=sys.stderr, flush=True)
        res["config"] = asdict(tile_config(D, torch.bfloat16, DEV))
        for spec in specs:
            row = ours(spec, args.T, D)
            res["rows"].append(row)
            print(f"[{time.time() - t0:.0f}s] {row}", file=sys.stderr, flush=True)
        if not args.sweep_only:
            res["rows"].append({**ours(ts.Dense(), args.T, D, backend="auto"), "spec": "Dense() auto"})
        if (args.sweep or args.sweep_only) and D == 64:
            for over in sweep:
                try:
                    with override_config(**over):
                        row = ours(ts.Hash(buckets=16), args.T, D)
                except Exception as e:  # noqa: BLE001
                    row = {"error": repr(e)[:300]}
                row["override"] = over
                res["sweep"].append(row)
                print(f"[{time.time() - t0:.0f}s] sweep {over}: {row.get('fwd')}, {row.get('fwd_bwd')}", file=sys.stderr, flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "probe.json").write_text(json.dumps(res, indent=1, default=str))
    print(f"\n{'spec':40s} {'D':>4s} {'fwd':>7s} {'fwdbwd':>7s} {'+decide':>7s} {'prep':>6s} {'k.fwd':>6s} {'k.f+b':>6s} {'visit%':>6s} {'err':>8s} {'MiB':>7s}")
    for D, s in res["sdpa"].items():
        for name, r in s.items():
            print(f"{'sdpa ' + name:48s} {D:>4} {r.get('fwd', float('nan')):7.3f} {r.get('fwd_bwd', float('nan')):7.3f}")
    for r in res["rows"]:
        print(f"{r['spec'][:40]:40s} {r['D']:>4} {r['fwd']:7.3f} {r['fwd_bwd']:7.3f} {r['fwd_bwd_with_decide']:7.3f} "
              f"{r['prepare']:6.3f} {r.get('kernel_fwd', float('nan')):6.3f} {r.get('kernel_fwd_bwd', float('nan')):6.3f} "
              f"{100 * r['visited_fraction']:6.1f} {r['max_err_vs_ref']:8.1e} {r['peak_mib']:7.0f}")  # fmt: skip
    for r in res["sweep"]:
        print(f"sweep {r['override']}: fwd {r.get('fwd', float('nan')):.3f} fwd+bwd {r.get('fwd_bwd', float('nan')):.3f} "
              f"kernel fwd {r.get('kernel_fwd', float('nan')):.3f} kernel fwd+bwd {r.get('kernel_fwd_bwd', float('nan')):.3f}")
    print(f"total {time.time() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
