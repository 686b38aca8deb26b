"""Host time inside one call, by function: wraps the functions a call runs with timers and
reports per-call means (us), forward and backward, started on an idle device."""
import json, os, sys, time, statistics, collections
import torch
sys.path.insert(0, ".")
import tilesparse as ts
from tilesparse import api, execute as ex_mod
from tilesparse.backends.triton import op as top, launch as tl_launch, nonfinite
from tilesparse.backends.triton import builder as tbuilder
from tilesparse.patterns import decision_errors

ON = [False]
acc = collections.defaultdict(float)
cnt = collections.defaultdict(int)

def wrap(owner, name, label=None, static=False):
    fn = getattr(owner, name)
    fn = getattr(fn, "__func__", fn)
    label = label or f"{getattr(owner, '__name__', owner)}.{name}"
    def w(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            if ON[0]:
                acc[label] += time.perf_counter() - t
                cnt[label] += 1
    setattr(owner, name, staticmethod(w) if static else w)

wrap(top._SparseAttention, "backward", "bwd: _SparseAttention.backward", static=True)
wrap(top._SparseAttention, "forward", "fwd: _SparseAttention.forward", static=True)
wrap(tl_launch.LeanKernel, "launch", "LeanKernel.launch")
wrap(tl_launch, "arg_key", "arg_key")
wrap(api.CompiledAttention, "_eager", "fwd: _eager")
wrap(api.CompiledAttention, "_plan", "fwd: _plan")
wrap(api.CompiledAttention, "_decisions", "fwd: _decisions")
for step in list(ex_mod._STEPS):
    pass
class _D:  # the step table holds functions: wrap them in place
    pass
for step, fn in list(ex_mod._STEPS.items()):
    holder = _D(); holder.f = fn
    wrap(holder, "f", f"fwd: step {step}")
    ex_mod._STEPS[step] = holder.f
wrap(decision_errors, "poisoned", "fwd: poisoned")
wrap(api, "poisoned", "fwd: api.poisoned")
import tilesparse.ir as ir_mod
wrap(api, "check_inputs", "fwd: check_inputs")

dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if dev.type == "cpu":
    torch.cuda.synchronize = lambda *a: None
out = {}
for shape, name, spec in (("1x16x16x64x4096", "keep0.7", ts.QKDrop(keep=0.7)), ("1x16x16x64x4096", "dense-triton", ts.Dense()),
                          ("1x32x8x128x4096", "keep0.7", ts.QKDrop(keep=0.7)), ("1x32x8x128x4096", "hash16", ts.Hash(buckets=16))):
    B, H, Hkv, D, T = map(int, shape.split("x"))
    if dev.type == "cpu":
        H, Hkv, D, T = 2, 1, 16, 64
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    k = torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    v = torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    go = torch.randn_like(q)
    op = ts.compile(spec, causal=True, backend="triton")
    d = op.decide(q, k)
    dec = ts.Decisions(**{n: None if t is None else t.clone() for n, t in d.items()})
    for _ in range(5):
        op(q, k, v, decisions=dec).backward(go)
    torch.cuda.synchronize()
    for phase in ("fwd", "bwd"):
        acc.clear(); cnt.clear()
        tot = []
        N = 50 if dev.type == 'cuda' else 1
        for _ in range(N):
            torch.cuda.synchronize()
            if phase == "fwd":
                ON[0] = True
                t0 = time.perf_counter(); o = op(q, k, v, decisions=dec); tot.append(time.perf_counter() - t0)
                ON[0] = False
            else:
                o = op(q, k, v, decisions=dec); torch.cuda.synchronize()
                ON[0] = True
                t0 = time.perf_counter(); o.backward(go); tot.append(time.perf_counter() - t0)
                ON[0] = False
        torch.cuda.synchronize()
        r = {"total": 1e6 * statistics.fmean(tot)}
        for kk, vv in acc.items():
            r[kk] = 1e6 * vv / N
            r["n:" + kk] = cnt[kk] / N
        out[f"{shape}/{name}/{phase}"] = r
        print(shape, name, phase, {kk: round(vv, 1) for kk, vv in r.items()}, flush=True)
os.makedirs(os.environ.get("OUT", "/tmp"), exist_ok=True)
json.dump(out, open(os.path.join(os.environ.get("OUT", "/tmp"), "diag_host2.json"), "w"), indent=1)
