"""Host time per call: where the CPU spends a call when the GPU is not the bottleneck.

Tiny inputs (B=1, H=2, T=256, D=64, bf16) so every kernel finishes long before the next launch
is issued; each figure is the mean host time of ``--calls`` back-to-back calls (time.perf_counter,
one synchronize at the end), after warm-up (compilation excluded). Rows: the whole call with
decisions given (forward; forward+backward), decide alone, prepare alone, the attention kernels
alone through the autograd function (forward; forward+backward), one bare Triton launch of the
forward kernel, and for scale a bare torch op (``torch.empty`` + ``add_``) and F.sdpa. Writes
probe_host.json under --out and prints a table.

    python3 benchmarks/probe_host.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import tilesparse as ts  # noqa: E402
from tilesparse.backends.triton.op import launch_fwd, sparse_attention, tile_config  # noqa: E402


def host_us(fn, calls: int) -> float:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return 1e6 * (t1 - t0) / calls


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    dev = torch.device("cuda")
    B, H, T, D = 1, 2, 256, 64
    q, k, v = (torch.randn((B, H, T, D), device=dev, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    go = torch.randn_like(q)
    rows = {}
    for name, spec in (("hash16", ts.Hash(buckets=16)), ("keep0.5", ts.QKDrop(keep=0.5)), ("dense-triton", ts.Dense())):
        attn = ts.compile(spec, causal=True, backend="triton", validate=False)
        dec = attn.decide(q, k)
        prep = attn.prepare(q, k, v, decisions=dec)
        g = prep.groups[0]
        cfg = tile_config(D, q.dtype, dev)

        def fwd_bwd(f):
            return lambda: torch.autograd.grad(f(), (q, k, v), go)

        call = lambda: attn(q, k, v, decisions=dec)  # noqa: E731
        kern = lambda: sparse_attention(q, k, v, g, D**-0.5, cfg)  # noqa: E731
        o = torch.empty_like(q)
        lse = torch.empty((B, H, T), device=dev, dtype=torch.float32)

        def launch():
            launch_fwd(q, k, v, o, lse, g, D**-0.5, cfg)

        with torch.no_grad():
            no_grad_call = host_us(call, args.calls)
        rows[name] = {
            "call_fwd": host_us(call, args.calls),
            "call_fwd_no_grad": no_grad_call,
            "call_fwd_bwd": host_us(fwd_bwd(call), args.calls),
            "decide": host_us(lambda: attn.decide(q, k), args.calls),
            "prepare": host_us(lambda: attn.prepare(q, k, v, decisions=dec), args.calls),
            "kernels_fwd": host_us(kern, args.calls),
            "kernels_fwd_bwd": host_us(fwd_bwd(kern), args.calls),
            "one_fwd_launch": host_us(launch, args.calls),
        }
        print(name, {k2: round(v2, 1) for k2, v2 in rows[name].items()}, flush=True)
    x = torch.randn((1024,), device=dev)
    rows["torch"] = {
        "empty_add": host_us(lambda: torch.empty_like(x).add_(1.0), args.calls),
        "sdpa_fwd": host_us(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), args.calls),
        "sdpa_fwd_bwd": host_us(
            lambda: torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), go),
            args.calls,
        ),
    }
    print("torch", {k2: round(v2, 1) for k2, v2 in rows["torch"].items()}, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "cmd": " ".join(sys.argv), "unit": "us"}
    (out / "probe_host.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
