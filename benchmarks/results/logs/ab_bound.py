"""A/B of an eager call's time before and after the bound steps (#12): run once per tree, the
tree chosen by PYTHONPATH (the script imports whichever ``tilesparse`` it finds and records its
path). Per pattern and shape (bf16, causal, decisions given and trusted, or made in the call):
forward, forward+backward (``torch.autograd.grad`` with a fixed output gradient), and the
forward with decisions made, each three ways, in us per call:

- ``host``: the median of 300 calls, each started on an idle device (a synchronize before it,
  not timed): the time to enqueue one call;
- ``b2b``: calls back to back (``tilesparse.bench.timing.time_call``, do_bench): GPU time, once
  the host keeps ahead;
- ``sync``: the median of 200 calls with a synchronize after each
  (``tilesparse.bench.timing.synchronized_ms``): what a step that waits on its result sees.

cuDNN and flash SDPA are timed the same way in the same process. Autograd's device thread is
off (``torch.autograd.set_multithreading_enabled(False)``), as in runs 148-156.
Usage: ab_bound.py OUT.json LABEL [SHAPES [PATTERNS [warm]]]: SHAPES "64,128" (the head dims of the two
shapes), PATTERNS comma-separated names or "all"; "warm": run each call a few times, untimed, and
write nothing (fills Triton's compile cache, several processes at once)."""
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tilesparse as ts
from tilesparse.bench.timing import synchronized_ms, time_call

torch.autograd.set_multithreading_enabled(False)
dev = torch.device("cuda")
OUT, LABEL = Path(sys.argv[1]), sys.argv[2]
SHAPES = (sys.argv[3] if len(sys.argv) > 3 else "64,128").split(",")
WANT = sys.argv[4] if len(sys.argv) > 4 else "all"
WARM = len(sys.argv) > 5 and sys.argv[5] == "warm"
rows: dict = {}


def host(fn, n=300):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    ts_ = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter_ns()
        fn()
        ts_.append(time.perf_counter_ns() - t)
    torch.cuda.synchronize()
    return statistics.median(ts_) / 1e3


def three(fn) -> dict:
    if WARM:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        return {}
    b2b = 1e3 * time_call(fn, dev, warmup_ms=25, rep_ms=100, min_reps=20, cpu_reps=0)[0]
    return {"host": round(host(fn), 1), "b2b": round(b2b, 1), "sync": round(1e3 * synchronized_ms(fn, dev, calls=200), 1)}


def report(key: str, r: dict) -> None:
    if WARM:
        print("warmed", key, flush=True)
        return
    rows[key] = r
    print(key, r, flush=True)
    OUT.write_text(json.dumps({"meta": {"label": LABEL, "tilesparse": ts.__file__, "torch": torch.__version__,
                                        "unit": "us per call: host (median of 300 from an idle device), b2b "
                                                "(do_bench, back to back), sync (median of 200, a synchronize after each)"},
                               "rows": rows}, indent=1))


PATTERNS = {
    "dense": ts.Dense(),
    "qkdrop0.5": ts.QKDrop(keep=0.5),
    "hash16": ts.Hash(buckets=16),
    "hybrid": ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.5)]),
    "perhead": ts.PerHead(dense_heads=[0, 1], rest=ts.Hash(buckets=16)),
    "topk16": ts.TopKFeatures(k=16),
}
for B, H, Hkv, D, T in ((1, 16, 16, 64, 4096), (1, 32, 8, 128, 4096)):
    if str(D) not in SHAPES:
        continue
    shape = f"B{B}_H{H}_Hkv{Hkv}_D{D}_T{T}"
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_(True)
    k, v = (torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_(True) for _ in range(2))
    go = torch.randn_like(q)
    for name, spec in PATTERNS.items():
        if WANT != "all" and name not in WANT.split(","):
            continue
        attn = ts.compile(spec, causal=True, backend="triton")
        dec = attn.decide(q, k)
        fwd = lambda: attn(q, k, v, decisions=dec)  # noqa: E731
        fb = lambda: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go)  # noqa: E731
        with torch.no_grad():
            made = lambda: attn(q, k, v)  # noqa: E731
            r_made = three(made)
        report(f"{shape}/{name}", {"fwd": three(fwd), "fwd_bwd": three(fb), "fwd_decide_nograd": r_made})
    for label, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
        with sdpa_kernel(backend):
            sdpa = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != H)  # noqa: E731
            report(f"{shape}/sdpa_{label}", {
                "fwd": three(sdpa),
                "fwd_bwd": three(lambda: torch.autograd.grad(sdpa(), (q, k, v), go)),
            })
