"""cProfile of the host side of attn.decide (B=2, H=12, D=64, T=16,384, bf16; Hash(16) and
Hash(16)+QKDrop(0.7)): 300 calls, a synchronize every 10, by own time and by cumulative time.
cProfile inflates small Python functions: read the order, not the times. Also the plain wall
time per call (no profiler), back to back with a synchronize every 10 calls."""
import cProfile, io, pstats, sys, time
import torch
sys.path.insert(0, ".")
import tilesparse as ts

dev = torch.device("cuda")
B, H, D, T = 2, 12, 64, 16384
q = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16)
k = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16)
for name, spec in (("hash16", ts.Hash(buckets=16)), ("hybrid", ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)]))):
    attn = ts.compile(spec, causal=True)
    for _ in range(20):
        attn.decide(q, k)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for i in range(300):
        attn.decide(q, k)
        if i % 10 == 9:
            torch.cuda.synchronize()
    print(f"{name}: {(time.perf_counter() - t) / 300 * 1e6:.0f} us per decide (wall, no profiler)")
    pr = cProfile.Profile()
    pr.enable()
    for i in range(300):
        attn.decide(q, k)
        if i % 10 == 9:
            torch.cuda.synchronize()
    pr.disable()
    for key in ("tottime", "cumtime"):
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats(key).print_stats(28)
        print(f"== {name} by {key}\n" + "\n".join(s.getvalue().splitlines()[6:]))
