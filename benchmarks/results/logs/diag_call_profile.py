"""Where a forward+backward call's host time goes, after the lean path's argument handling was
rewritten (launch.prepared: C-level loops, the scalars' keys remembered per argument layout).

1. prepared() on 16 CUDA tensors and 23 scalars against the previous version (one Python loop,
   v1 below), microseconds a call, 5 rounds of 20,000 alternating.
2. cProfile of 300 forward+backward calls (each synchronized), decisions given (copies, so
   checked), bf16, causal, backend="triton": the top functions by own time and by cumulative time.

    python3 benchmarks/results/logs/diag_call_profile.py 1x32x8x128x4096 hash16 keep0.7
"""
import cProfile, io, pstats, statistics, sys, time
import torch
import tilesparse as ts
from tilesparse.backends.triton import launch as L
from tilesparse.bench.grid import PATTERNS


def prepared_v1(args):
    key, run = [], []
    for a in args:
        kind = type(a)
        if kind is int:
            key.append(L._int_key(a)); run.append(a)
        elif isinstance(a, torch.Tensor):
            address = a.data_ptr(); key.append(a.dtype); key.append(address % 16 == 0)
            run.append(address if a.is_cuda else a)
        elif kind is float:
            key.append(float); run.append(a)
        else:
            key.append((a,)); run.append(a)
    return tuple(key), tuple(run)


bufs = [torch.zeros(1024, device="cuda") for _ in range(16)]
args = (*bufs, *([4096] * 22), 0.125)
res = {"v1": [], "v2": []}
for _ in range(5):
    for name, fn in (("v1", prepared_v1), ("v2", L.prepared)):
        t0 = time.perf_counter()
        for _ in range(20000):
            fn(args)
        res[name].append(1e6 * (time.perf_counter() - t0) / 20000)
print({k: round(statistics.median(v), 2) for k, v in res.items()}, "us a call of prepared (39 args)", flush=True)

B, H, Hkv, D, T = map(int, sys.argv[1].split("x"))
g = torch.Generator("cuda").manual_seed(0)
q = torch.randn((B, H, T, D), device="cuda", dtype=torch.bfloat16, generator=g, requires_grad=True)
k, v = (torch.randn((B, Hkv, T, D), device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_() for _ in range(2))
go = torch.randn((B, H, T, D), device="cuda", dtype=torch.bfloat16, generator=g)
for pat in sys.argv[2:]:
    op = ts.compile(PATTERNS[pat].spec, causal=True, backend="triton")
    dec = op.decide(q, k)
    given = ts.Decisions(**{n: None if t is None else t.clone() for n, t in dec.items()})

    def fwd_bwd():
        op(q, k, v, decisions=given).backward(go)
        q.grad = k.grad = v.grad = None

    for _ in range(5):
        fwd_bwd()
    torch.cuda.synchronize()
    pr = cProfile.Profile()
    host = []
    for i in range(300):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        pr.enable()
        fwd_bwd()
        pr.disable()
        host.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    print(f"=== {sys.argv[1]} {pat}: host per fwd+bwd under the profiler, median {1e6 * statistics.median(host):.0f} us",
          flush=True)
    for order, n in (("tottime", 40), ("cumtime", 45)):
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats(order).print_stats(n)
        lines = [ln for ln in s.getvalue().splitlines() if ln.strip()]
        print(f"--- by {order}\n" + "\n".join(lines[3:n + 8]), flush=True)
