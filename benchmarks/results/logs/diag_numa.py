"""Whether the CPU a process runs on moves its host time per call: the benchmark processes of
runs 176-179 each measured cuDNN SDPA's own forward+backward at 430-564 µs synchronized at one
shape, a spread that follows the process, not the pattern. One process pins itself in turn to
each NUMA node's CPUs (``os.sched_setaffinity``; the nodes from ``/sys/devices/system/node``, the
GPU's own from its PCI device's ``numa_node``) and times, per node and round, cuDNN SDPA's
forward+backward and a Hash(16) forward (decisions given) at B=1, H=16, D=64, T=4,096: the host
median of 100 calls from an idle GPU and the synchronized median of 100.

    python3 diag_numa.py OUT.json
"""
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tilesparse as ts
from tilesparse.bench.grid import PATTERNS


def cpus(node: Path) -> list[int]:
    out = []
    for part in (node / "cpulist").read_text().strip().split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


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
nodes = sorted(Path("/sys/devices/system/node").glob("node[0-9]*"))
bus = torch.cuda.get_device_properties(0).pci_bus_id.lower()
gpu_node = next((p.read_text().strip() for p in Path("/sys/bus/pci/devices").glob(f"*{bus[-7:]}*/numa_node")), "?")
print("nodes", {n.name: len(cpus(n)) for n in nodes}, "gpu", bus, "numa_node", gpu_node, flush=True)
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
for r in range(4):
    for node in nodes:
        os.sched_setaffinity(0, cpus(node))
        time.sleep(0.05)
        row = {"round": r, "node": node.name, "cudnn_fwd_bwd": medians(cudnn), "hash16_fwd": medians(hash16)}
        rows.append(row)
        print(row, flush=True)
json.dump({"gpu_numa_node": gpu_node, "rows": rows}, open(sys.argv[1], "w"), indent=1)
