"""The host time of a dense Triton forward (B=1, H=16, D=64, T=4096, bf16, causal), layer by
layer: each layer timed alone with what it needs made beforehand (medians of 400 calls, each
from an idle device; the gap between a layer and the next inner one is that layer's own
cost). Usage: host_layers.py OUT.json"""
import json, statistics, sys, time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import tilesparse as ts  # noqa: E402
from tilesparse.backends.triton import kernels  # noqa: E402
from tilesparse.backends.triton.launch import lean  # noqa: E402
from tilesparse.backends.triton.nonfinite import new_flags  # noqa: E402
from tilesparse.backends.triton.op import _SparseAttention, launch_fwd, tile_config  # noqa: E402
from tilesparse.execute import execute  # noqa: E402
from tilesparse.ir import check_inputs  # noqa: E402

torch.autograd.set_multithreading_enabled(False)
dev = torch.device("cuda")


def med(fn, n=400, sync=True):
    for _ in range(30):
        fn()
    torch.cuda.synchronize()
    ts_ = []
    for _ in range(n):
        if sync:
            torch.cuda.synchronize()
        t = time.perf_counter_ns()
        fn()
        ts_.append(time.perf_counter_ns() - t)
    torch.cuda.synchronize()
    return statistics.median(ts_) / 1e3


rows = {}
for shape in ((1, 16, 16, 64, 4096), (1, 32, 8, 128, 4096)):
    B, H, Hkv, D, T = shape
    g = torch.Generator(device=dev).manual_seed(0)
    q = torch.randn(B, H, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_(True)
    k, v = (torch.randn(B, Hkv, T, D, device=dev, dtype=torch.bfloat16, generator=g).requires_grad_(True) for _ in range(2))
    for name, spec in (("dense", ts.Dense()), ("keep0.5", ts.QKDrop(keep=0.5)), ("hash16", ts.Hash(buckets=16))):
        attn = ts.compile(spec, causal=True, backend="triton")
        dec = attn.decide(q, k)  # trusted: no checks
        inputs = check_inputs(q, k, v, scale=attn.scale)
        plan = attn._plan(inputs, decides=False)
        a = plan.assignments[0]
        prepared = a.builder.build(plan.program, a.group, a.heads, dec, inputs)
        cfg = tile_config(D, q.dtype, dev)
        Hg = len(prepared.heads)
        o = torch.empty((B, Hg, T, D), dtype=q.dtype, device=dev)
        lse = torch.empty((B, Hg, T), dtype=torch.float32, device=dev)
        flag = new_flags(dev)[0]
        r = {}
        with torch.no_grad():
            r["call (no grad)"] = med(lambda: attn(q, k, v, decisions=dec))
        r["call"] = med(lambda: attn(q, k, v, decisions=dec))
        r["_eager"] = med(lambda: attn._eager(q, k, v, dec, None))
        r["check_inputs"] = med(lambda: check_inputs(q, k, v, scale=attn.scale))
        r["_plan"] = med(lambda: attn._plan(inputs, decides=False))
        r["execute"] = med(lambda: execute(plan, inputs, attn._decide_step(inputs, dec, None, [])))
        r["index build"] = med(lambda: a.builder.build(plan.program, a.group, a.heads, dec, inputs))
        r["backend.attend"] = med(lambda: a.backend.attend(prepared, inputs))
        r["_SparseAttention.apply"] = med(lambda: _SparseAttention.apply(q, k, v, prepared, inputs.scale, cfg))
        r["launch_fwd (pair)"] = med(lambda: launch_fwd(q, k, v, o, lse, prepared, inputs.scale, cfg, flag))
        r["new_flags"] = med(lambda: new_flags(dev))
        r["2x torch.empty"] = med(lambda: (torch.empty((B, Hg, T, D), dtype=q.dtype, device=dev), torch.empty((B, Hg, T), dtype=torch.float32, device=dev)))
        rows[f"{B}x{H}x{Hkv}x{D}x{T}/{name}"] = r
        print(f"{B}x{H}x{Hkv}x{D}x{T}/{name}", {k_: round(v_, 1) for k_, v_ in r.items()}, flush=True)
Path(sys.argv[1]).write_text(json.dumps({"meta": {"unit": "us, median of 400 calls each from an idle device",
                                                  "torch": torch.__version__}, "rows": rows}, indent=1))
