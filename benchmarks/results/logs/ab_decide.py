"""Host time of a call that makes its decisions, for an A/B between two trees (run once per
tree, in its own process): per pattern (B=2, H=12, D=64, T=16,384, bf16), attn.decide's wall
time per call (300 calls, a synchronize every 10: bound by the host), and the forward with
decisions given and made, back to back (CUDA events, 30 calls). One JSON line per pattern."""
import json, sys, time
import torch
import tilesparse as ts

tag = sys.argv[1]
dev = torch.device("cuda")
B, H, D, T = 2, 12, 64, 16384
g = torch.Generator(device=dev).manual_seed(0)
q, k, v = (torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, generator=g) for _ in range(3))


def b2b(fn, n=30):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / n


for name, spec in (("hash16", ts.Hash(buckets=16)), ("hash64", ts.Hash(buckets=64)), ("keep0.7", ts.QKDrop(keep=0.7)),
                   ("hybrid", ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)]))):
    attn = ts.compile(spec, causal=True)
    for _ in range(20):
        dec = attn.decide(q, k)
    torch.cuda.synchronize()
    t = time.perf_counter()
    for i in range(300):
        attn.decide(q, k)
        if i % 10 == 9:
            torch.cuda.synchronize()
    decide_us = (time.perf_counter() - t) / 300 * 1e6
    row = dict(tree=tag, pattern=name, decide_us=decide_us, fwd_given_ms=b2b(lambda: attn(q, k, v, decisions=dec)),
               fwd_made_ms=b2b(lambda: attn(q, k, v)))
    print(json.dumps(row), flush=True)
