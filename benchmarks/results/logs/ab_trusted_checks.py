"""In-process A/B of trusted decisions' checks (#12, session 30): the tree before (792c55b: the
structural checks of given decisions on every call, their stamp read over every field) against
the change (Decisions.fits: those checks once per call sizes while trust holds; trusted_for
reading the stamp of the trusted objects only), toggled by swapping the two methods back, in
blocks of 150 calls alternated 12 times (the CPU's drift between separate processes was wider
than the change). CPU, every Triton launch stubbed out (TRITON_INTERPRET=1; this library's
Python and torch calls alone), fp32, T=64, decisions given by attn.decide (trusted).
Usage: TRITON_INTERPRET=1 python ab_trusted_checks.py"""
import sys, time, statistics
sys.path.insert(0, "/work/main")
import torch, tilesparse as ts
from tilesparse.backends.triton import launch as L
L.LeanKernel.launch = lambda self, grid, args, constants, keyed=None: None
torch.set_num_threads(1)
import tilesparse.patterns.decisions as pd
new_trusted_for, new_fits = pd.Decisions.trusted_for, pd.Decisions.fits
def old_trusted_for(self, spec):  # the tree before (792c55b)
    if not self.is_trusted:
        return False
    own = getattr(self, "_trusted_spec", None)
    if own is not spec and own != spec:
        return False
    stamp = getattr(self, "_stamp", None)
    return stamp is not None and stamp == pd._stamp(tuple(getattr(self, n) for n in pd.DECISION_FIELDS))  # every field read anew
def use(new):
    pd.Decisions.trusted_for = new_trusted_for if new else old_trusted_for
    pd.Decisions.fits = new_fits if new else (lambda self, key: False)
specs = {"dense": ts.Dense(), "keep0.5": ts.QKDrop(keep=0.5), "hash16": ts.Hash(buckets=16),
         "hybrid": ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.5)])}
for (B,H,Hkv,D,T) in ((1,16,16,64,64), (1,32,8,128,64)):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(B,H,T,D, generator=g).requires_grad_()
    k, v = (torch.randn(B,Hkv,T,D, generator=g).requires_grad_() for _ in range(2))
    go = torch.randn_like(q)
    for name, spec in specs.items():
        attn = ts.compile(spec, causal=True, backend="triton")
        dec = attn.decide(q, k)
        for mode in ("fwd", "fwd_bwd"):
            step = (lambda: attn(q, k, v, decisions=dec)) if mode == "fwd" else (lambda: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go))
            def block():
                t0 = time.perf_counter_ns()
                for _ in range(150): step()
                return (time.perf_counter_ns()-t0)/150/1e3
            for _ in range(100): step()
            a, b = [], []
            for r in range(12):
                use(False); a.append(block()); use(True); b.append(block())
            print(f"D{D} {name:8} {mode:8}: before {statistics.median(a):6.1f}  after {statistics.median(b):6.1f}  paired diff {statistics.median(x-y for x,y in zip(a,b)):5.1f} us", flush=True)
