"""Where the time of a call that makes its own decisions goes (#12: decide adds <= 10%): per
pattern, forward and forward+backward back to back with decisions given and made, the host
time to enqueue one call from an idle GPU (given / made), attn.decide alone, and a profiler
table of the made-decisions forward (CPU ops by self time, CUDA kernels by time)."""
import json, os, sys, time, statistics
import torch
sys.path.insert(0, ".")
import tilesparse as ts

dev = torch.device("cuda")
PATS = {"hash16": ts.Hash(buckets=16), "hash64": ts.Hash(buckets=64), "keep0.7": ts.QKDrop(keep=0.7),
        "hybrid": ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)])}
out = {"rows": [], "profiles": {}}


def b2b(fn, n=30):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / n


def host(fn, n=20):
    ts_ = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        ts_.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(ts_)


for shape in ("2x12x12x64x16384", "2x12x12x128x16384"):
    B, H, Hkv, D, T = map(int, shape.split("x"))
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    k = torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    v = torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_()
    do = torch.randn_like(q)
    for name, spec in PATS.items():
        attn = ts.compile(spec, causal=True)
        with torch.no_grad():
            dec = attn.decide(q, k)
        given_f = lambda: attn(q.detach(), k.detach(), v.detach(), decisions=dec)
        made_f = lambda: attn(q.detach(), k.detach(), v.detach())
        given_fb = lambda: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), do)
        made_fb = lambda: torch.autograd.grad(attn(q, k, v), (q, k, v), do)
        decide = lambda: attn.decide(q.detach(), k.detach())
        row = dict(shape=shape, pattern=name)
        for label, fn in (("fwd_given", given_f), ("fwd_made", made_f), ("fb_given", given_fb), ("fb_made", made_fb), ("decide", decide)):
            row[label + "_ms"] = b2b(fn)
            row[label + "_host_us"] = host(fn)
        out["rows"].append(row)
        print(shape, name, {k_: round(v_, 3) for k_, v_ in row.items() if k_.endswith(("_ms", "_us"))}, flush=True)
        if name in ("hybrid", "hash64") and D == 64:
            from torch.profiler import profile, ProfilerActivity
            for _ in range(3):
                made_f()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    made_f()
                torch.cuda.synchronize()
            ka = prof.key_averages()
            out["profiles"][f"{shape}/{name}/cpu"] = ka.table(sort_by="self_cpu_time_total", row_limit=30)
            out["profiles"][f"{shape}/{name}/cuda"] = ka.table(sort_by="self_cuda_time_total", row_limit=20)
            print(out["profiles"][f"{shape}/{name}/cuda"][:3000], flush=True)
        del attn

os.makedirs(os.environ["OUT"] + "/r", exist_ok=True)
json.dump(out, open(os.environ["OUT"] + "/r/diag_decide_h200.json", "w"), indent=1)
for key, tab in out["profiles"].items():
    if key.endswith("cpu"):
        print(key)
        print(tab[:2500])
