"""PerHead's dense heads fused into the Triton launch of its rest (the plan ``backend='auto'``
makes at 4,096 tokens, run 197) against the plan without that fusion (``planner.plan._fuse_dense_heads``
returning None while the second op plans: the dense heads a group of their own, on the backend
the planner picks for them). Per shape: both plans' steps, the GPU time of every kernel of a
forward+backward (the profiler, 20 calls), and call by call (``ab_calls.paired``: "on" the
unfused plan, 200 pairs) the host and synchronized time of a forward+backward; decisions given
(``attn.decide``'s), bf16, causal; outputs and gradients compared.

    python3 benchmarks/results/logs/ab_perhead_fuse.py OUT.json
"""

import contextlib
import json
import sys
from pathlib import Path

import torch

import tilesparse as ts
from tilesparse.planner import plan as planner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_calls import paired  # noqa: E402

SHAPES = [(1, 16, 16, 64, 4096), (1, 32, 8, 128, 4096)]
SPEC = ts.PerHead(dense_heads=[0], rest=ts.Hash(buckets=16))


def kernel_us(fn, calls: int = 20) -> float:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    return round(sum(e.device_time for e in prof.events() if e.device_time > 0) / calls, 1)


def main(out: str) -> None:
    torch.autograd.set_multithreading_enabled(False)  # as call_times.py
    rows = []
    for B, H, Hkv, D, T in SHAPES:
        g = torch.Generator("cuda").manual_seed(0)
        q, k, v = (torch.randn((B, h, T, D), generator=g, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for h in (H, Hkv, Hkv))  # fmt: skip
        go = torch.randn_like(q)
        fused, unfused = ts.compile(SPEC, causal=True), ts.compile(SPEC, causal=True)
        dec = fused.decide(q, k)
        plans = {"fused": fused.explain(q, k, v)}
        fused(q, k, v, decisions=dec)  # planned as the library plans it
        real = planner._fuse_dense_heads
        planner._fuse_dense_heads = lambda *a, **kw: None
        try:
            plans["unfused"] = unfused.explain(q, k, v)
            unfused(q, k, v, decisions=dec)  # planned here, without the fusion
        finally:
            planner._fuse_dense_heads = real

        def call(attn):
            o = attn(q, k, v, decisions=dec)
            return (o, *torch.autograd.grad(o, (q, k, v), go))

        got = {name: call(a) for name, a in (("fused", fused), ("unfused", unfused))}
        diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(got["fused"], got["unfused"]))
        for _ in range(10):
            call(fused), call(unfused)
        kernels = {"fused": kernel_us(lambda: call(fused)), "unfused": kernel_us(lambda: call(unfused))}
        arm = {"off": True}

        @contextlib.contextmanager
        def turned(off: bool):
            arm["off"] = off
            yield

        def fn():
            call(fused if arm["off"] else unfused)

        row = {"shape": [B, H, Hkv, D, T], "plans": plans, "max_diff": diff, "kernel_us": kernels,
               "host": paired(fn, turned, 200, False), "sync": paired(fn, turned, 200, True)}
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k != "plans"}), flush=True)
        for name, text in plans.items():
            print(name, "|", " | ".join(line for line in text.splitlines() if line.startswith(("group", "steps"))))
    Path(out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                     "rows": rows}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1])
