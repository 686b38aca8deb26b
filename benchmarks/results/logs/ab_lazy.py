"""The forward's lazy rescaling (TileConfig.lazy_rescale; kernels._attn_fwd_inner) against the
eager rescale, in one process: per shape and pattern (bf16, causal, decisions given), the
forward and forward+backward of the public op, back to back (triton.testing.do_bench, median),
lazy off / on / off / on, and the largest difference between the two outputs."""
import json, os, sys
import torch
import triton
import tilesparse as ts
from tilesparse.backends.triton.op import override_config

dev = torch.device("cuda")
PATS = {"keep0.7": ts.QKDrop(keep=0.7), "keep0.5": ts.QKDrop(keep=0.5), "hash16": ts.Hash(buckets=16)}
rows = []
for shape in sys.argv[1].split(";"):
    B, H, Hkv, D, T = map(int, shape.split(","))
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    k, v = (torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_() for _ in range(2))
    do = torch.randn_like(q)
    for name, spec in PATS.items():
        attn = ts.compile(spec, causal=True)
        dec = attn.decide(q.detach(), k.detach())
        fwd = lambda: attn(q.detach(), k.detach(), v.detach(), decisions=dec)
        fb = lambda: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), do)
        row = dict(shape=shape, pattern=name)
        outs = {}
        for rep in range(2):
            for lazy in (0, 1):
                with override_config(lazy_rescale=lazy):
                    outs[lazy] = fwd()
                    for mode, fn, ms in (("fwd", fwd, 300), ("fb", fb, 500)):
                        t = triton.testing.do_bench(fn, warmup=50, rep=ms, return_mode="median")
                        row.setdefault(f"{mode}_lazy{lazy}", []).append(t)
        row["max_diff"] = (outs[0].float() - outs[1].float()).abs().max().item()
        rows.append(row)
        print(json.dumps(row), flush=True)
os.makedirs(os.environ["OUT"] + "/r", exist_ok=True)
with open(os.environ["OUT"] + "/r/ab_lazy_h200.json", "a") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
