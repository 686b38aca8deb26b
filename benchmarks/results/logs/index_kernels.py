"""GPU time per kernel of one index build (``attn.prepare``, decisions given) at the model shape
(B=1, H=32, Hkv=8, D=128), Triton's builder (backend="triton") against the automatic plan's,
from the profiler; printed and written as JSON lines. ``--sort-rows`` and ``--one-hot-cats``
set Triton's counting sort's chunk size and where it ranks by a one-hot tile instead of sorting
(index._SORT_ROWS, index._ONE_HOT_CATS), timing Triton's builder alone.

    python3 benchmarks/results/logs/index_kernels.py OUT.jsonl [--sort-rows N] [--one-hot-cats N]
"""

import argparse
import json
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

import tilesparse as ts
from tilesparse.backends.triton import index

ITERS = 5
SPECS = {"hash16": ts.Hash(buckets=16), "hash64": ts.Hash(buckets=64), "keep0.7": ts.QKDrop(keep=0.7),
         "hybrid": ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)])}  # fmt: skip


def per_kernel(fn) -> dict[str, float]:
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(ITERS):
            fn()
        torch.cuda.synchronize()
    return {e.key[:60]: round(e.device_time_total / 1e3 / ITERS, 4) for e in prof.key_averages() if e.device_time_total > 0}


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--sort-rows", type=int)
    p.add_argument("--one-hot-cats", type=int)
    p.add_argument("--specs", default="hash16,hash64")
    args = p.parse_args()
    forced = args.sort_rows is not None or args.one_hot_cats is not None
    if args.sort_rows is not None:
        index._SORT_ROWS = args.sort_rows
    if args.one_hot_cats is not None:
        index._ONE_HOT_CATS = args.one_hot_cats
    index._static.cache_clear()
    rows = []
    for T in (32768, 65536):
        g = torch.Generator("cuda").manual_seed(0)
        q = torch.randn((1, 32, T, 128), device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn((1, 8, T, 128), device="cuda", dtype=torch.bfloat16, generator=g)
        for name in args.specs.split(","):
            auto = ts.compile(SPECS[name], causal=True, validate=False)
            dec = auto.decide(q, k, generator=g)
            for backend in ("triton",) if forced else ("triton", "auto"):
                attn = auto if backend == "auto" else ts.compile(SPECS[name], causal=True, backend=backend, validate=False)
                plan = attn.plan(q, k, k, decisions=dec)
                kernels = per_kernel(lambda attn=attn: attn.prepare(q, k, k, decisions=dec))
                row = {"T": T, "pattern": name, "backend": backend, "sort_rows": index._SORT_ROWS,
                       "one_hot_cats": index._ONE_HOT_CATS,
                       "builders": [a.builder.NAME if a.builder else None for a in plan.assignments],
                       "total_ms": round(sum(kernels.values()), 4), "kernels_ms": kernels}  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
