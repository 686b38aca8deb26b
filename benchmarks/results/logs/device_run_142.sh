#!/bin/bash
# #12: where the host time of an eager forward+backward call goes on the GPU's host: cProfile of
# 300 calls (after warm-up) of Hash(16) and QKDrop(0.7), B=1 H=32 Hkv=8 D=128 T=4,096 bf16 causal,
# decisions given (made by the op: trusted), and SDPA's cuDNN call for scale; the calls' host and
# synchronized means printed first.
source benchmarks/results/logs/device_prelude.sh; mkdir -p $R
python3 - <<'PY' 2>&1 | tee $R/profile_host_run142.log
import cProfile, io, pstats, time, torch
import torch.nn.functional as F
import tilesparse as ts
B, H, Hkv, D, T = 1, 32, 8, 128, 4096
dev = "cuda"
q = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16).requires_grad_(True)
k, v = (torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16).requires_grad_(True) for _ in range(2))
go = torch.randn_like(q)
def timed(fn, n=300):
    for _ in range(20): fn()
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(n): fn(); torch.cuda.synchronize()
    sync = (time.perf_counter() - t) / n * 1e6
    host = []
    for _ in range(n):
        torch.cuda.synchronize(); t = time.perf_counter(); fn(); host.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    return sorted(host)[n // 2], sync
with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
    sd = lambda: torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True), (q, k, v), go)
    print("sdpa cudnn fwd_bwd host median %.0f us, sync mean %.0f us" % timed(sd))
for name, spec in (("hash16", ts.Hash(buckets=16)), ("keep0.7", ts.QKDrop(keep=0.7))):
    attn = ts.compile(spec, causal=True, backend="triton")
    dec = attn.decide(q, k)
    f = lambda: attn(q, k, v, decisions=dec)
    fb = lambda: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go)
    print(name, "fwd host median %.0f us, sync mean %.0f us" % timed(f))
    print(name, "fwd_bwd host median %.0f us, sync mean %.0f us" % timed(fb))
    for label, fn in (("fwd_bwd", fb),):
        pr = cProfile.Profile()
        for _ in range(300):
            torch.cuda.synchronize(); pr.enable(); fn(); pr.disable()
        torch.cuda.synchronize()
        for key in ("tottime", "cumulative"):
            s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats(key).print_stats(45)
            print(f"==== {name} {label} by {key}\n" + s.getvalue())
PY
