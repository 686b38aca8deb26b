"""Whether the CPU a process runs on moves its host time per call: the benchmark processes of
runs 176-179 each measured cuDNN SDPA's own forward+backward at 430-564 µs synchronized at one
shape, a spread that follows the process, not the pattern. The machine has one NUMA node
(run 180's topology), so one process pins itself in turn to each CPU (``os.sched_setaffinity``)
and times, per CPU and round, cuDNN SDPA's forward+backward and a Hash(16) forward (decisions
given) at B=1, H=16, D=64, T=4,096: the host median of 100 calls from an idle GPU and the
synchronized median of 100.

    python3 diag_numa.py OUT.json
"""
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tilesparse as ts
from tilesparse.bench.grid import PATTERNS


def medians(fn, n=100):
    host, sync = [], []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        host.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
        sync.append(time.perf_counter() - t0)
    return round(1e6 * statistics.median(host), 1), round(1e6 * statistics.median(sync), 1)


torch.autograd.set_multithreading_enabled(False)
every = sorted(os.sched_getaffinity(0))
print("cpus", every, flush=True)
g = torch.Generator("cuda").manual_seed(0)
q, k, v = (torch.randn((1, 16, 4096, 64), device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_() for _ in range(3))
go = torch.randn_like(q)
attn = ts.compile(PATTERNS["hash16"].spec, causal=True, backend="triton")
dec = attn.decide(q, k)


def cudnn():
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True), (q, k, v), go)


def hash16():
    attn(q, k, v, decisions=dec)


for fn in (cudnn, hash16):
    for _ in range(10):
        fn()
rows = []
for r in range(2):
    for cpu in every:
        os.sched_setaffinity(0, {cpu})
        time.sleep(0.05)
        row = {"round": r, "cpu": cpu, "cudnn_fwd_bwd": medians(cudnn), "hash16_fwd": medians(hash16)}
        rows.append(row)
        print(row, flush=True)
json.dump({"rows": rows}, open(sys.argv[1], "w"), indent=1)
