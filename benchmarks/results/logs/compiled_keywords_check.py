"""The op's call with SDPA keywords under torch.compile (fullgraph, inductor) on CUDA equals eager."""
import torch

import tilesparse as ts

attn = ts.compile(ts.Hash(buckets=4))
q, k, v = (torch.randn(1, 4, 1024, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
dec = attn.decide(q, k)
pad = torch.ones(1, 1024, dtype=torch.bool, device="cuda")
pad[0, :7] = False
f = torch.compile(lambda q, k, v: attn(q, k, v, decisions=dec, scale=0.2, key_padding_mask=pad), fullgraph=True)
got, want = f(q, k, v), attn(q, k, v, decisions=dec, scale=0.2, key_padding_mask=pad)
gg = torch.autograd.grad(got.float().sum(), (q, k, v))
gw = torch.autograd.grad(want.float().sum(), (q, k, v))
print("compiled call with keywords: max out diff", float((got - want).abs().max()),
      "max grad diff", max(float((a - b).abs().max()) for a, b in zip(gg, gw)))
