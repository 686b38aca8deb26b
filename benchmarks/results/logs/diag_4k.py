"""Where the GPU time of a short call goes (#12's T=4,096 rows): for each pattern, every kernel's
GPU time per forward+backward call (decisions given) from the profiler, their count and sum,
against the call timed back to back and synchronized, eager and replayed (``cuda_graphs=True``),
and cuDNN's dense call. Printed (a table last) and written as JSON.

    python3 benchmarks/results/logs/diag_4k.py 1,16,16,64,4096 $OUT/r/diag_4k.json [patterns]
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from bench_models import bf16_inputs, kernel_table, run_header, timed  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import tilesparse as ts  # noqa: E402
from tilesparse.bench.grid import PATTERNS  # noqa: E402


if __name__ == "__main__":
    shape, out = sys.argv[1], sys.argv[2]
    names = (sys.argv[3] if len(sys.argv) > 3 else "keep0.7,keep0.5,hash16,hash64,hybrid,perhead,topk8").split(",")
    (B, H, Hkv, D, T), q, k, v, go = bf16_inputs(shape)
    res = run_header(rows=[])
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        step = lambda: torch.autograd.grad(  # noqa: E731
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != H), (q, k, v), go)
        res["rows"].append({"name": "cudnn", "eager": timed(step), "kernels": kernel_table(step, iters=5)})
    for name in names:
        p = PATTERNS[name]
        row = {"name": name}
        for mode, graphs in (("eager", False), ("replayed", True)):
            attn = ts.compile(p.spec, causal=True, backend=p.backend or "auto", cuda_graphs=graphs)
            dec = attn.decide(q.detach(), k.detach(), generator=torch.Generator(q.device).manual_seed(1))
            step = lambda: torch.autograd.grad(attn(q, k, v, decisions=dec), (q, k, v), go)  # noqa: E731
            row[mode] = timed(step)
            if not graphs:
                row["kernels"] = kernel_table(step, iters=5)
        res["rows"].append(row)
        print(json.dumps(row), flush=True)
    Path(out).write_text(json.dumps(res, indent=1))
    head = f"{'name':8s} {'eager ms/sync':>14s} {'replay ms/sync':>15s} {'kern sum':>8s} {'launches':>3s}"
    print(head + "  top kernels (us)")
    for r in res["rows"]:
        kn = r["kernels"]
        top = sorted(kn.items(), key=lambda x: -x[1][0])[:6]
        rep = r.get("replayed", {"ms": 0, "sync_ms": 0})
        print(f"{r['name']:8s} {r['eager']['ms']:6.3f}/{r['eager']['sync_ms']:6.3f} "
              f"{rep['ms']:6.3f}/{rep['sync_ms']:6.3f} "
              f"{sum(t for t, _ in kn.values()):8.3f} {sum(c for _, c in kn.values()):3.0f}  "
              + "; ".join(f"{n[:28]} {t * 1e3:.0f}" for n, (t, _) in top))
