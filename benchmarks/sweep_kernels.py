"""Tile-configuration sweep of the Triton kernels, per kernel, against cuDNN and flash SDPA.

Run on a GPU: ``python3 benchmarks/sweep_kernels.py --out DIR [--shapes ...] [--configs JSON]``.
For every shape (B, H, Hkv, D, T; bf16, causal) and pattern, with decisions given and the index
built once, it times each tile configuration's kernels alone: the whole forward and
forward+backward with ``triton.testing.do_bench`` (median), and each kernel's own GPU time from
the profiler (forward, dQ, dK/dV, and the GQA sum of dK/dV into the kv heads). It reports
effective TFLOP/s over the tiles each kernel visits (4·D flops per element of a visited tile
forward, 10·D backward) next to cuDNN's over the causal triangle, and the largest difference
from the default configuration's output and gradients (a configuration that changes the result
is flagged).
Writes ``sweep_kernels.json`` under DIR and prints a table last.
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
from torch.nn.attention import SDPBackend, sdpa_kernel

import tilesparse as ts
from tilesparse.backends.triton.op import forward_tile, override_config, parse_overrides, sparse_attention, tile_config
from tilesparse.ir import tile_stats

# the model-shape benchmark's patterns and timers (this directory is on sys.path when a script here runs)
from bench_models import PATTERNS, bf16_inputs, gpu_ms, kernel_ms, print_rows, run_header

DEV = torch.device("cuda")


def ref_error(attn, q, k, v, dec, out) -> float:
    """Largest error of ``out`` against the float32 reference on the first and the last query
    head of batch 0 (the last kv group under GQA)."""
    H, Hkv = q.shape[1], k.shape[1]
    err = 0.0
    with torch.no_grad():
        for h in (0, H - 1):
            kh = h // (H // Hkv)
            d1 = ts.Decisions(**{n: None if t is None else t[:1, h : h + 1] for n, t in dec.items()})
            ref = attn.reference(q[:1, h : h + 1], k[:1, kh : kh + 1], v[:1, kh : kh + 1], decisions=d1)
            err = max(err, float((out[:1, h : h + 1].float() - ref).abs().max()))
    return err


def _write(res: dict, out: str, tag: str) -> None:
    Path(out).mkdir(parents=True, exist_ok=True)
    (Path(out) / f"sweep_{tag}.json").write_text(json.dumps(res, indent=1, default=str))


def causal_elems(T: int) -> int:
    return T * (T + 1) // 2


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default="1,32,8,128,16384", help="B,H,Hkv,D,T;...")
    ap.add_argument("--patterns", default="keep0.7,hash16")
    ap.add_argument("--configs", default="[{}]", help="JSON list of TileConfig overrides (or @file); the first is the baseline")
    ap.add_argument("--no-sdpa", action="store_true")
    ap.add_argument("--tag", default="kernels", help="the JSON is sweep_TAG.json")
    args = ap.parse_args()
    t0 = time.time()
    configs = parse_overrides(args.configs)
    res = run_header(rows=[], sdpa=[])
    for shape in args.shapes.split(";"):
        (B, H, Hkv, D, T), q, k, v, go = bf16_inputs(shape)
        fl_fwd = 4 * D * causal_elems(T) * B * H
        if not args.no_sdpa:
            for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
                try:
                    with sdpa_kernel(backend):
                        f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != H)  # noqa: E731
                        with torch.no_grad():
                            fwd = gpu_ms(f)
                        fb = gpu_ms(lambda: torch.autograd.grad(f(), (q, k, v), go))
                    row = {"name": name, "shape": [B, H, Hkv, D, T], "fwd": fwd, "fwd_bwd": fb,
                           "fwd_tflops": fl_fwd / fwd / 1e9, "bwd_tflops": 2.5 * fl_fwd / (fb - fwd) / 1e9}  # fmt: skip
                except Exception as e:  # noqa: BLE001 - record and go on
                    row = {"name": name, "shape": [B, H, Hkv, D, T], "error": repr(e)[:300]}
                res["sdpa"].append(row)
                print(f"[{time.time() - t0:.0f}s] {row}", file=sys.stderr, flush=True)
        for pname in args.patterns.split(","):
            dec = ts.compile(PATTERNS[pname]).decide(q, k, generator=torch.Generator(DEV).manual_seed(1))
            base_out = None
            for over in configs:
                row = {"pattern": pname, "shape": [B, H, Hkv, D, T], "override": over}
                # a fresh op per config: a plan (and its index blocks) is cached per op
                attn = ts.compile(PATTERNS[pname], causal=True, backend="triton")
                try:
                    with override_config(**over):
                        cfg = tile_config(D, torch.bfloat16, DEV)
                        prep = attn.prepare(q, k, v, decisions=dec).groups[0]
                        kern = lambda: sparse_attention(q, k, v, prep, D**-0.5, cfg)  # noqa: E731
                        step = lambda: torch.autograd.grad(kern(), (q, k, v), go)  # noqa: E731
                        with torch.no_grad():
                            out = kern()
                            row["fwd"] = gpu_ms(kern)
                        row["fwd_bwd"] = gpu_ms(step)
                        row["kernels"] = kernel_ms(step)
                        grads = step()
                    row["config"] = asdict(cfg)
                    if base_out is None:
                        base_out, base_grads = out, grads
                    row["max_diff_vs_baseline"] = float((out.float() - base_out.float()).abs().max())
                    # the gradients' largest difference from the baseline config's, relative to
                    # that gradient's largest value (dq, dk, dv)
                    row["grad_rel_diff_vs_baseline"] = [
                        float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30))
                        for a, b in zip(grads, base_grads, strict=True)
                    ]
                    row["max_err_vs_ref"] = ref_error(attn, q, k, v, dec, out)
                    fwd_n = forward_tile(prep.group, cfg)
                    st_f = tile_stats(prep, block_n=fwd_n, exact=False)
                    st_q = tile_stats(prep, block_n=cfg.dq_n, exact=False)
                    row["visited_fraction"] = st_f["visited_fraction"]
                    fwd_el = st_f["visited"] * cfg.block_q * fwd_n
                    dq_el = st_q["visited"] * cfg.block_q * cfg.dq_n
                    kn = row["kernels"]
                    row["fwd_tflops"] = 4 * D * fwd_el / kn.get("_attn_fwd", float("nan")) / 1e9
                    row["dq_tflops"] = 4 * D * dq_el / kn.get("_attn_bwd_dq", float("nan")) / 1e9  # 2 of the 5 dots
                    row["dkdv_tflops"] = 6 * D * dq_el / kn.get("_attn_bwd_dkdv", float("nan")) / 1e9  # 3 of 5
                except Exception as e:  # noqa: BLE001 - a config that fails to compile or run
                    row["error"] = repr(e)[:400]
                res["rows"].append(row)
                print(f"[{time.time() - t0:.0f}s] {json.dumps(row, default=str)}", file=sys.stderr, flush=True)
                _write(res, args.out, args.tag)  # after every row: a run cut short keeps what it measured
                torch.cuda.empty_cache()
        del q, k, v, go
        torch.cuda.empty_cache()
    _write(res, args.out, args.tag)
    for r in res["sdpa"]:
        if "error" not in r:
            print(f"{r['name']:8s} {r['shape']} fwd {r['fwd']:.3f} fwd+bwd {r['fwd_bwd']:.3f} "
                  f"TF/s fwd {r['fwd_tflops']:.0f} bwd {r['bwd_tflops']:.0f}")  # fmt: skip
    def line(r: dict) -> str:
        kn = r["kernels"]
        return (f"{r['pattern']:8s} {str(r['override']):60s} fwd {r['fwd']:7.3f} f+b {r['fwd_bwd']:7.3f} | "
                f"k.fwd {kn.get('_attn_fwd', 0):6.3f} dq {kn.get('_attn_bwd_dq', 0):6.3f} "
                f"dkdv {kn.get('_attn_bwd_dkdv', 0):6.3f} other {kn.get('other', 0):6.3f} | "
                f"TF/s {r['fwd_tflops']:4.0f} {r['dq_tflops']:4.0f} {r['dkdv_tflops']:4.0f} "
                f"vis {r['visited_fraction']:.2f} err {r['max_err_vs_ref']:.1e} "
                f"grad {max(r['grad_rel_diff_vs_baseline']):.1e}")  # fmt: skip

    return print_rows(res["rows"], lambda r: f"{r['pattern']:8s} {r['override']}", line, t0)


if __name__ == "__main__":
    raise SystemExit(main())
