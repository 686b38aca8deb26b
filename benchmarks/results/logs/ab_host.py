"""Host time of eager calls, for an A/B of two trees run in alternating processes (#12), with
autograd's worker thread on (torch's default) and off (``torch.autograd.set_multithreading_enabled``).

Per shape and pattern (decisions given, bf16, causal): the forward's host time, the backward's
alone (``torch.autograd.grad``), the whole forward+backward's host time and its synchronized
wall time, each from an idle GPU, medians of ``N`` calls, µs; cuDNN SDPA the same for scale.
Then the GPU time of a forward+backward (``triton.testing.do_bench``, ms) at ``--gpu-shape``.
Only the public API is used, so the script runs against any tree on PYTHONPATH.

    python3 ab_host.py LABEL OUT.json [--shapes 1,16,16,64,4096 ...] [--gpu-shape 1,32,8,128,16384]
    python3 ab_host.py table OUT1.json OUT2.json ...   # medians per label prefix (old1, old2 -> old)
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from triton.testing import do_bench

import tilesparse as ts

PATTERNS = {
    "hash16": ts.Hash(buckets=16),
    "keep0.7": ts.QKDrop(keep=0.7),
    "hybrid": ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)]),
    "dense-triton": ts.Dense(),
}
N = 40


def inputs(shape: str):
    B, H, Hkv, D, T = map(int, shape.split(","))
    g = torch.Generator("cuda").manual_seed(0)
    q = torch.randn((B, H, T, D), device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
    k, v = (torch.randn((B, Hkv, T, D), device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_() for _ in "kv")
    return q, k, v, torch.randn_like(q)


def host(fwd, q, k, v, go) -> dict:
    f_us, b_us, fb_us, sync_us = [], [], [], []
    for _ in range(N):
        torch.cuda.synchronize()
        t = time.perf_counter()
        out = fwd()
        f_us.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
        t = time.perf_counter()
        torch.autograd.grad(out, (q, k, v), go)
        b_us.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
        t = time.perf_counter()
        torch.autograd.grad(fwd(), (q, k, v), go)
        fb_us.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
        sync_us.append((time.perf_counter() - t) * 1e6)
    med = statistics.median
    return {"fwd_us": med(f_us), "bwd_us": med(b_us), "fwd_bwd_us": med(fb_us), "fwd_bwd_sync_us": med(sync_us)}


def sdpa(q, k, v):
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def table(paths: list[str]) -> None:
    """One line per (shape, pattern, threads): each label prefix's median over its runs."""
    cells = {}
    for p in paths:
        for r in json.load(open(p))["rows"]:
            arm = r["label"].rstrip("0123456789")
            key = (r["shape"], r["pattern"], r.get("threads"))
            for m in ("fwd_us", "bwd_us", "fwd_bwd_us", "fwd_bwd_sync_us", "gpu_fwd_bwd_ms"):
                if m in r:
                    cells.setdefault(key, {}).setdefault(m, {}).setdefault(arm, []).append(r[m])
    for (shape, pattern, threads), ms in cells.items():
        line = " ".join(
            f"{m[:-3]} " + "/".join(f"{a}:{statistics.median(v):.3g}" for a, v in sorted(arms.items()))
            for m, arms in ms.items()
        )
        print(f"{shape:16s} {pattern:12s} threads={threads!s:5s} {line}")


def main() -> None:
    import sys

    if sys.argv[1] == "table":
        table(sys.argv[2:])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("label")
    ap.add_argument("out")
    ap.add_argument("--shapes", nargs="+", default=["1,16,16,64,4096", "1,32,8,128,4096"])
    ap.add_argument("--gpu-shape", default="1,32,8,128,16384")
    args = ap.parse_args()
    rows = []
    for shape in args.shapes:
        q, k, v, go = inputs(shape)
        calls = {"sdpa cudnn": lambda: sdpa(q, k, v)}
        for name, spec in PATTERNS.items():
            attn = ts.compile(spec, causal=True, backend="triton")
            dec = attn.decide(q.detach(), k.detach(), generator=torch.Generator("cuda").manual_seed(1))
            calls[name] = lambda attn=attn, dec=dec: attn(q, k, v, decisions=dec)
        for threads in (True, False):
            with torch.autograd.set_multithreading_enabled(threads):
                for name, fn in calls.items():
                    for _ in range(3):
                        torch.autograd.grad(fn(), (q, k, v), go)
                    rows.append({"label": args.label, "shape": shape, "pattern": name, "threads": threads,
                                 **host(fn, q, k, v, go)})  # fmt: skip
                    print(json.dumps(rows[-1]), flush=True)
    q, k, v, go = inputs(args.gpu_shape)
    for name in ("hash16", "keep0.7"):
        attn = ts.compile(PATTERNS[name], causal=True, backend="triton")
        dec = attn.decide(q.detach(), k.detach(), generator=torch.Generator("cuda").manual_seed(1))
        step = lambda attn=attn, dec=dec: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go)  # noqa: E731
        rows.append({"label": args.label, "shape": args.gpu_shape, "pattern": name, "gpu_fwd_bwd_ms": do_bench(step)})
        print(json.dumps(rows[-1]), flush=True)
    with open(args.out, "w") as f:
        json.dump({"label": args.label, "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
