"""Where a call's host time goes on the GPU machine, sampled by py-spy (not a tracing profiler:
the call runs at its own speed). One process per (shape, pattern, mode) loops calls of a
compiled op (decisions given as copies, so checked, or made in the call without gradients: ``fwd_decide``; bf16,
causal, backend="triton"), each
followed by a synchronize, for --seconds; py-spy (outside) samples it. Also prints the median
host time per call without the profiler, for scale.

    py-spy record -r 2000 -f raw -o OUT.raw -- python3 diag_host_spy.py 1x16x16x64x4096 hash16 fwd 15
"""
import statistics, sys, time
import torch
import tilesparse as ts
from tilesparse.bench.grid import PATTERNS

shape, pat, mode, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
B, H, Hkv, D, T = map(int, shape.split("x"))
g = torch.Generator("cuda").manual_seed(0)
q = torch.randn((B, H, T, D), device="cuda", dtype=torch.bfloat16, generator=g, requires_grad=True)
k, v = (torch.randn((B, Hkv, T, D), device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_() for _ in range(2))
go = torch.randn((B, H, T, D), device="cuda", dtype=torch.bfloat16, generator=g)
op = ts.compile(PATTERNS[pat].spec, causal=True, backend="triton")
dec = op.decide(q, k)
given = ts.Decisions(**{n: None if t is None else t.clone() for n, t in dec.items()})


def fwd():
    return op(q, k, v, decisions=given)


def fwd_bwd():
    torch.autograd.grad(op(q, k, v, decisions=given), (q, k, v), go)


def fwd_decide():
    with torch.no_grad():
        return op(q, k, v)


call = {"fwd": fwd, "fwd_bwd": fwd_bwd, "fwd_decide": fwd_decide}[mode]
for _ in range(10):
    call()
torch.cuda.synchronize()
host = []
t_end = time.perf_counter() + seconds
while time.perf_counter() < t_end:
    t0 = time.perf_counter()
    call()
    host.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
print(f"{shape} {pat} {mode}: {len(host)} calls, host median {1e6 * statistics.median(host):.0f} us", flush=True)
