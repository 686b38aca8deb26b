"""Where the backward's host time goes: fwd+bwd host time from idle, backward-only host time
(forward already finished on the GPU), the autograd floor (a one-kernel Function), a sync check,
and a torch.profiler table of the runtime calls."""
import json, sys, time, statistics
import torch, torch.nn.functional as F
sys.path.insert(0, ".")
import tilesparse as ts

dev = torch.device("cuda")
out = {}

def host(fn, calls=50, pre=None):
    """median host time (us) of fn() from an idle device; with pre, of fn(pre()) (pre untimed)"""
    call = (lambda: fn(pre())) if pre else fn
    for _ in range(3):
        call()
    ts_ = []
    for _ in range(calls):
        arg = pre() if pre else None
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(arg) if pre else fn()
        ts_.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return 1e6 * statistics.median(ts_)


class Floor(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2
    @staticmethod
    def backward(ctx, g):
        return g * 2

x = torch.randn(1024, device=dev, requires_grad=True)
out["floor_fwd"] = host(lambda: Floor.apply(x))
out["floor_fwd_bwd"] = host(lambda: Floor.apply(x).backward(torch.ones_like(x)))
out["floor_fwd_bwd_sum"] = host(lambda: Floor.apply(x).sum().backward())

for shape in ("1x16x16x64x4096", "1x32x8x128x4096"):
    B, H, Hkv, D, T = map(int, shape.split("x"))
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    k = torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    v = torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    go = torch.randn_like(q)
    for name, spec in (("dense-triton", ts.Dense()), ("keep0.7", ts.QKDrop(keep=0.7)), ("sdpa", None)):
        if spec is None:
            f = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != H)
        else:
            op = ts.compile(spec, causal=True, backend="triton")
            dec = op.decide(q, k)
            f = lambda: op(q, k, v, decisions=dec)
        r = {}
        r["fwd"] = host(f)
        r["fwd_bwd"] = host(lambda: f().backward(go))
        def pre():
            o = f(); torch.cuda.synchronize(); return o
        r["bwd_only_idle"] = host(lambda o: o.backward(go), pre=pre)
        # sync check
        torch.cuda.set_sync_debug_mode("error")
        try:
            f().backward(go); r["sync_free"] = True
        except RuntimeError as e:
            r["sync_free"] = False; r["sync_error"] = str(e)[:300]
        torch.cuda.set_sync_debug_mode(0)
        from torch.profiler import profile, ProfilerActivity
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                f().backward(go)
                torch.cuda.synchronize()
        tab = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25)
        r["profile"] = tab
        out[f"{shape}/{name}"] = r
        print(shape, name, {kk: (round(vv) if isinstance(vv, float) else vv) for kk, vv in r.items() if kk != "profile"}, flush=True)
import os
os.makedirs(os.environ.get("OUT", "/tmp"), exist_ok=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "diag_bwd.json"), "w"), indent=1)
for kk, r in out.items():
    if isinstance(r, dict) and "profile" in r and ("128" in kk):
        print("=====", kk); print(r["profile"])
print({k: round(v) for k, v in out.items() if not isinstance(v, dict)})
