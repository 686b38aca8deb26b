"""Does the graphed perhead call fail with the id-check kernel, without it, alone?"""
import sys, traceback
import torch
sys.path.insert(0, "tests")
import tilesparse as ts
from tilesparse import api
from builtin_specs import one_of_each_kind

mode = sys.argv[1]
if mode == "torch-ops":
    api.range_check_for = lambda device: None
SPECS = one_of_each_kind(keep=0.5, buckets=8, k=16)
names = sys.argv[2].split(",")
g = torch.Generator("cuda").manual_seed(0)
for name in names:
    attn = ts.compile(SPECS[name])
    q, k, v = (torch.randn((1, 4, 2048, 64), generator=g, device="cuda", dtype=torch.bfloat16).requires_grad_() for _ in range(3))
    fields = {n: t.clone() for n, t in attn.decide(q, k).items() if t is not None}
    dec = ts.Decisions(**fields) if fields else None
    try:
        graphed = torch.cuda.make_graphed_callables(lambda q_, k_, v_: attn(q_, k_, v_, decisions=dec), (q, k, v))
        out = graphed(q, k, v); out.sum().backward(); torch.cuda.synchronize()
        print(mode, name, "ok", flush=True)
    except Exception as e:
        print(mode, name, "FAILED", type(e).__name__, str(e)[:200], flush=True)
        traceback.print_exc(limit=-6)
        break
