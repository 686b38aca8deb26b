"""TopKFeatures on the Triton backend: q~ and k~ by one launch a side (features.py) against the
torch ops they replaced (a 0/1 mask per side, ones for the other heads, k repeated per query
head, a product; autograd's gradients), in one process, alternating: the same op, the old
``_sparsify`` patched in for the "torch" rows. Decisions given (trusted), bf16, causal.

Per shape: GPU time of a forward and of a forward+backward (``triton.testing.do_bench``, ms),
host time of each from an idle GPU (median of 30, µs), and the largest difference between the
two paths' outputs and gradients (finite inputs: the same numbers up to the sum order of the
GQA gradient). Two rounds of each path.

    python3 benchmarks/results/logs/ab_topk_features.py OUT.json
    python3 benchmarks/results/logs/ab_topk_features.py profile B,H,Hkv,D,T OUT.txt
"""

import json
import statistics
import sys
import time

import torch
from triton.testing import do_bench

import tilesparse as ts
import tilesparse.backends.triton as tb
from tilesparse.backends.reference import feature_mask
from tilesparse.ir.prepare import head_index

NEW = tb._sparsify


def old_sparsify(q, k, g, inputs):
    """The torch ops before features.py (commit d176d06)."""
    heads = head_index(g.heads, q.device)
    D = inputs.head_dim
    fq = torch.ones_like(q).index_copy_(1, heads, feature_mask(g.q_support, D, q.dtype))
    k_per_head = k.repeat_interleave(inputs.group, dim=1) if inputs.group > 1 else k
    fk = torch.ones_like(k_per_head).index_copy_(1, heads, feature_mask(g.k_support, D, k.dtype))
    return q * fq, k_per_head * fk


def host_us(fn, n=30):
    times = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def _setup(B, H, Hkv, D, T):
    """bf16 q, k, v (needing grad) and an output gradient, a TopKFeatures(8) op and its decisions."""
    g = torch.Generator("cuda").manual_seed(0)
    q = torch.randn((B, H, T, D), device="cuda", generator=g, dtype=torch.bfloat16).requires_grad_()
    k, v = (torch.randn((B, Hkv, T, D), device="cuda", generator=g, dtype=torch.bfloat16).requires_grad_()
            for _ in range(2))  # fmt: skip
    attn = ts.compile(ts.TopKFeatures(k=8), causal=True, backend="triton")
    return q, k, v, torch.randn_like(q), attn, attn.decide(q, k)


def main(out_path):
    rows = []
    shapes = [(1, 16, 16, 64, 4096), (1, 32, 8, 128, 4096), (1, 32, 8, 128, 16384), (2, 12, 12, 64, 16384)]
    for B, H, Hkv, D, T in shapes:
        q, k, v, go, attn, dec = _setup(B, H, Hkv, D, T)
        fwd = lambda: attn(q, k, v, decisions=dec)  # noqa: E731
        fb = lambda: torch.autograd.grad(fwd(), (q, k, v), go)  # noqa: E731
        results = {}
        for rnd in range(2):
            for name, fn in (("features", NEW), ("torch", old_sparsify)):
                tb._sparsify = fn
                fb()
                torch.cuda.synchronize()
                r = results.setdefault(name, {"fwd_ms": [], "fwd_bwd_ms": [], "fwd_host_us": [], "fwd_bwd_host_us": []})
                r["fwd_ms"].append(do_bench(fwd, warmup=10, rep=100))
                r["fwd_bwd_ms"].append(do_bench(fb, warmup=10, rep=100))
                r["fwd_host_us"].append(host_us(fwd))
                r["fwd_bwd_host_us"].append(host_us(fb))
        outs = {}
        for name, fn in (("features", NEW), ("torch", old_sparsify)):
            tb._sparsify = fn
            o = fwd()
            outs[name] = [o.float(), *(t.float() for t in torch.autograd.grad(o, (q, k, v), go))]
        tb._sparsify = NEW
        err = max((a - b).abs().max().item() for a, b in zip(outs["features"], outs["torch"], strict=True))
        row = dict(shape=f"{B}x{H}x{Hkv}x{D}x{T}", max_abs_diff=err, **{f"{n}_{m}": v for n, r in results.items() for m, v in r.items()})
        rows.append(row)
        print(json.dumps(row), flush=True)
    json.dump({"meta": {"what": __doc__.split("\n\n")[0], "torch": torch.__version__}, "rows": rows},
              open(out_path, "w"), indent=1)  # fmt: skip
    print(f"{'shape':<20} {'path':<9} {'fwd ms':>8} {'f+b ms':>8} {'fwd host':>9} {'f+b host':>9}  max diff")
    for r in rows:
        for n in ("torch", "features"):
            print(f"{r['shape']:<20} {n:<9} {min(r[n + '_fwd_ms']):8.3f} {min(r[n + '_fwd_bwd_ms']):8.3f} "
                  f"{min(r[n + '_fwd_host_us']):9.0f} {min(r[n + '_fwd_bwd_host_us']):9.0f}  {r['max_abs_diff']:.3g}")  # fmt: skip


def profile(shape, out_path):
    """``profile B,H,Hkv,D,T OUT.txt``: torch.profiler's GPU time by kernel over 3 forward+backward
    calls of each path (run 148: where the D=64 backward's extra time goes)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    B, H, Hkv, D, T = (int(x) for x in shape.split(","))
    q, k, v, go, attn, dec = _setup(B, H, Hkv, D, T)
    text = []
    for name, fn in (("features", NEW), ("torch", old_sparsify)):
        tb._sparsify = fn
        for _ in range(3):
            torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go)
        torch.cuda.synchronize()
        with torch_profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go)
            torch.cuda.synchronize()
        text.append(f"== {name} {shape} (3 forward+backward calls)\n" + prof.key_averages().table(sort_by="cuda_time_total", row_limit=25))
    tb._sparsify = NEW
    open(out_path, "w").write("\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    if sys.argv[1] == "profile":
        profile(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1])
