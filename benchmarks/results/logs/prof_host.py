"""cProfile of the host side of 200 forward+backward calls (decisions given) of one pattern at
B=1, H=16, D=64, T=4,096, bf16, causal, after warm-up; a synchronize every 10 calls."""
import cProfile, pstats, sys, io
import torch
import tilesparse as ts

name = sys.argv[1]
spec = {"hash16": ts.Hash(buckets=16), "keep0.7": ts.QKDrop(keep=0.7), "dense-triton": ts.Dense()}[name]
attn = ts.compile(spec, causal=True, backend="triton")
g = torch.Generator("cuda").manual_seed(0)
q, k, v = (torch.randn(1, 16, 4096, 64, device="cuda", generator=g, dtype=torch.bfloat16).requires_grad_() for _ in range(3))
dec = attn.decide(q, k) if name != "dense-triton" else None
def step():
    attn(q, k, v, decisions=dec).sum().backward()
for _ in range(20):
    step()
torch.cuda.synchronize()
pr = cProfile.Profile()
pr.enable()
for i in range(200):
    step()
    if i % 10 == 9:
        torch.cuda.synchronize()
pr.disable()
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(35)
print(s.getvalue())
