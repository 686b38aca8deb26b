"""Host time of one forward call with each index builder, interleaved A/B in one process: the op
on backend="auto" (the planner's builder) against backend="triton" (Triton's own), decisions given
(copies, so checked), bf16, causal. Per round and op: the mean host time of 30 calls each started
on an idle GPU (probe_host's method), and the mean of 30 calls back to back (events around the
loop); then a cProfile of 200 calls of each op (a synchronize every 10), top functions by own time.

    python3 benchmarks/results/logs/diag_builder_host.py 2x12x12x64x32768 hybrid
"""
import cProfile, io, json, pstats, statistics, sys, time
import torch
import tilesparse as ts
from tilesparse.bench.grid import PATTERNS

B, H, Hkv, D, T = map(int, sys.argv[1].split("x"))
spec = PATTERNS[sys.argv[2]].spec
g = torch.Generator("cuda").manual_seed(0)
q = torch.randn((B, H, T, D), device="cuda", dtype=torch.bfloat16, generator=g)
k, v = (torch.randn((B, Hkv, T, D), device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
ops = {b: ts.compile(spec, causal=True, backend=b) for b in ("auto", "triton")}
dec = ops["triton"].decide(q, k)
given = ts.Decisions(**{n: None if t is None else t.clone() for n, t in dec.items()})
for b, op in ops.items():
    print(b, [a.builder.NAME for a in op.plan(q, k, v).assignments], flush=True)
calls = {b: (lambda op=op: op(q, k, v, decisions=given)) for b, op in ops.items()}
for fn in calls.values():
    for _ in range(5):
        fn()
torch.cuda.synchronize()


def host_us(fn, n=30):
    ts_ = []
    for _ in range(n):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        ts_.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return 1e6 * statistics.fmean(ts_)


def b2b_us(fn, n=30):
    a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    a.record()
    for _ in range(n):
        fn()
    e.record()
    torch.cuda.synchronize()
    return 1e3 * a.elapsed_time(e) / n


rows = []
for r in range(8):
    for b, fn in calls.items():
        rows.append({"round": r, "op": b, "host_us": host_us(fn), "b2b_us": b2b_us(fn)})
        print(json.dumps(rows[-1]), flush=True)
for b in calls:
    hs = [x["host_us"] for x in rows if x["op"] == b]
    bs = [x["b2b_us"] for x in rows if x["op"] == b]
    print(f"{b}: host median {statistics.median(hs):.0f} us (min {min(hs):.0f}), back to back median "
          f"{statistics.median(bs):.0f} us (min {min(bs):.0f})", flush=True)
for b, fn in calls.items():
    pr = cProfile.Profile()
    pr.enable()
    for i in range(200):
        fn()
        if i % 10 == 9:
            torch.cuda.synchronize()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22)
    print(f"=== cProfile {b}\n" + "\n".join(s.getvalue().splitlines()[:40]), flush=True)
