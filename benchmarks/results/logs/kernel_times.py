"""Each kernel's GPU time per forward+backward call of QKDrop(0.7), decisions given, from the
profiler (bench_models.kernel_ms), at one B,H,Hkv,D,T shape; printed and written as JSON.

    python3 benchmarks/results/logs/kernel_times.py 1,32,8,128,32768 $OUT/r/dq_kernel_d128.json
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/

import torch  # noqa: E402
from bench_models import bf16_inputs, kernel_ms  # noqa: E402

import tilesparse as ts  # noqa: E402

if __name__ == "__main__":
    shape, out = sys.argv[1], sys.argv[2]
    _, q, k, v, go = bf16_inputs(shape)
    attn = ts.compile(ts.QKDrop(keep=0.7), causal=True)
    dec = attn.decide(q.detach(), k.detach())
    ms = kernel_ms(lambda: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go))
    print("kernels ms per call", {n: round(t, 3) for n, t in ms.items()})
    Path(out).write_text(json.dumps({"kernels_ms": ms}))
