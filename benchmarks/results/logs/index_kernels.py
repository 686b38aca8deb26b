"""GPU time per kernel of one index build (``attn.prepare``, decisions given) at the model shape
(B=1, H=32, Hkv=8, D=128; ``--shape B,H,Hkv,D`` and ``--ts`` for others), Triton's builder
(backend="triton") against the automatic plan's, from the profiler, with the GPU time of a whole
forward call by kernel (``fwd_kernels_ms``: the attention kernel and the rest) and its time by
``do_bench`` (``fwd_ms``); printed and written as JSON lines. ``--sort-rows`` and
``--one-hot-cats`` set Triton's counting sort's chunk size and where it ranks by a one-hot tile instead of sorting
(index._SORT_ROWS, index._ONE_HOT_CATS), timing Triton's builder alone.

    python3 benchmarks/results/logs/index_kernels.py OUT.jsonl [--sort-rows N] [--one-hot-cats N]
        [--shape B,H,Hkv,D] [--ts T,T]
"""

import argparse
import json
import sys
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/

from bench_models import kernel_ms  # noqa: E402

import tilesparse as ts  # noqa: E402
from tilesparse.backends.triton import index  # noqa: E402

SPECS = {"hash16": ts.Hash(buckets=16), "hash64": ts.Hash(buckets=64), "keep0.7": ts.QKDrop(keep=0.7),
         "hybrid": ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)])}  # fmt: skip


def rounded(ms: dict[str, float]) -> dict[str, float]:
    """Each kernel's ms to 4 decimals."""
    return {kernel: round(t, 4) for kernel, t in ms.items()}


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("out", type=Path)
    p.add_argument("--sort-rows", type=int)
    p.add_argument("--one-hot-cats", type=int)
    p.add_argument("--specs", default="hash16,hash64")
    p.add_argument("--shape", default="1,32,8,128", help="B,H,Hkv,D")
    p.add_argument("--ts", default="32768,65536")
    args = p.parse_args()
    forced = args.sort_rows is not None or args.one_hot_cats is not None
    if args.sort_rows is not None:
        index._SORT_ROWS = args.sort_rows
    if args.one_hot_cats is not None:
        index._ONE_HOT_CATS = args.one_hot_cats
    index._static.cache_clear()
    rows = []
    B, H, Hkv, D = (int(x) for x in args.shape.split(","))
    for T in (int(t) for t in args.ts.split(",")):
        g = torch.Generator("cuda").manual_seed(0)
        q = torch.randn((B, H, T, D), device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn((B, Hkv, T, D), device="cuda", dtype=torch.bfloat16, generator=g)
        for name in args.specs.split(","):
            auto = ts.compile(SPECS[name], causal=True, validate=False)
            dec = auto.decide(q, k, generator=g)
            for backend in ("triton",) if forced else ("triton", "auto"):
                attn = auto if backend == "auto" else ts.compile(SPECS[name], causal=True, backend=backend,
                                                                 validate=False)  # fmt: skip
                plan = attn.plan(q, k, k, decisions=dec)
                prepare = lambda attn=attn: attn.prepare(q, k, k, decisions=dec)  # noqa: E731
                call = lambda attn=attn: attn(q, k, k, decisions=dec)  # noqa: E731 - the forward call
                kernels = rounded(kernel_ms(prepare, iters=5, every=True))
                fwd_kernels = rounded(kernel_ms(call, iters=5))
                fwd_ms = triton.testing.do_bench(call, rep=100)
                row = {"shape": [B, H, Hkv, D], "T": T, "pattern": name, "backend": backend,
                       "sort_rows": index._SORT_ROWS, "one_hot_cats": index._ONE_HOT_CATS,
                       "builders": [a.builder.NAME if a.builder else None for a in plan.assignments],
                       "total_ms": round(sum(kernels.values()), 4), "kernels_ms": kernels, "fwd_ms": round(fwd_ms, 4),
                       "fwd_kernels_ms": fwd_kernels}  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
    args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
