"""A/B of an eager call's host time on the CPU, every Triton launch stubbed out: this library's
Python and torch calls alone, without a kernel or Triton's launch cost (#12, the bound steps).
Run once per tree, the tree chosen by PYTHONPATH (the script records which ``tilesparse`` it
imported), under TRITON_INTERPRET=1 (the kernels are the interpreter's, never run).

CPU tensors (fp32, T=64, so that the few torch ops that compute take little), decisions given
and trusted (``attn.decide``), or made in the call; forward with gradients on, forward+backward
(``torch.autograd.grad`` with a fixed output gradient), and the forward with decisions made
under ``torch.no_grad()``. Each figure: the median over 5 blocks of the mean us per call of
300 calls. Usage: ab_cpu_host.py OUT.json LABEL"""
import json
import statistics
import sys
import time
from pathlib import Path

import torch

import tilesparse as ts
from tilesparse.backends.triton import launch as L

launches = [0]


def stub(self, grid, args, constants, keyed=None):
    launches[0] += 1


L.LeanKernel.launch = stub
L.LeanKernel._normal = lambda self, grid, args, constants: stub(self, grid, args, constants)
torch.set_num_threads(1)
OUT, LABEL = Path(sys.argv[1]), sys.argv[2]
PATTERNS = {
    "dense": ts.Dense(),
    "qkdrop0.5": ts.QKDrop(keep=0.5),
    "hash16": ts.Hash(buckets=16),
    "hybrid": ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.5)]),
    "perhead": ts.PerHead(dense_heads=[0, 1], rest=ts.Hash(buckets=16)),
    "topk16": ts.TopKFeatures(k=16),
}


def per_call_us(fn, calls=300, blocks=5) -> tuple[float, float]:
    """(median over blocks of the mean us per call, launches per call)."""
    for _ in range(30):
        fn()
    means = []
    launches[0] = 0
    for _ in range(blocks):
        t = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        means.append((time.perf_counter_ns() - t) / calls / 1e3)
    return round(statistics.median(means), 1), launches[0] / (calls * blocks)


rows = {}
for B, H, Hkv, D, T in ((1, 16, 16, 64, 64), (1, 32, 8, 128, 64)):
    shape = f"B{B}_H{H}_Hkv{Hkv}_D{D}_T{T}"
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B, H, T, D, generator=g).requires_grad_(True)
    k, v = (torch.randn(B, Hkv, T, D, generator=g).requires_grad_(True) for _ in range(2))
    go = torch.randn(q.shape, generator=g)
    for name, spec in PATTERNS.items():
        attn = ts.compile(spec, causal=True, backend="triton")
        dec = attn.decide(q, k)
        r = {}
        r["fwd"] = per_call_us(lambda: attn(q, k, v, decisions=dec))
        r["fwd_bwd"] = per_call_us(lambda: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go))
        with torch.no_grad():
            r["fwd_decide_nograd"] = per_call_us(lambda: attn(q, k, v))
        rows[f"{shape}/{name}"] = r
        print(shape, name, r, flush=True)
OUT.write_text(json.dumps({"meta": {"label": LABEL, "tilesparse": ts.__file__, "torch": torch.__version__,
                                    "unit": "[us per call (median over 5 blocks of the mean of 300), launches per call]"},
                           "rows": rows}, indent=1))
