"""The attention kernels' programs started longest first (``TileConfig.heavy_first``,
kernels._scheduled) against the grid's own order, on the GPU: per pattern and shape, the
attention kernels' GPU time a forward and a forward+backward (the profiler: every kernel whose
name starts with ``_attn``, the Triton and the warp-specialized ones, sanitizing variants
included; over 20 calls a turn, two turns an arm, the arms alternating), and whether the
outputs and gradients are equal bit for bit (and their largest difference). Decisions given
(``attn.decide``'s), bf16, causal. ARMS: a JSON list of two TileConfig overrides to compare in
place of heavy_first 0 and 1, labelled "grid" and "heavy_first" as those.

    python3 benchmarks/results/logs/ab_heavy_first.py OUT.json [SHAPE,...] [ARMS]   (SHAPE: BxHxHkvxDxT)
"""

import functools
import json
import sys

import torch
import triton

import tilesparse as ts
from tilesparse.backends.triton.op import override_config
from tilesparse.bench.grid import PATTERNS

SHAPES = [(1, 16, 16, 64, 4096), (1, 32, 8, 128, 4096), (2, 12, 12, 64, 16384), (1, 32, 8, 128, 16384)]
NAMES = ["dense-triton", "keep0.7", "keep0.5", "hash16", "hash64", "hybrid", "perhead"]
CALLS = 20


def kernel_us(fn) -> tuple[float, float]:
    """(forward, forward+backward) attention kernels' µs a call."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.name.startswith("_attn")]
    fwd = sum(e.device_time for e in ev if e.name.startswith("_attn_fwd"))
    return round(fwd / CALLS, 1), round(sum(e.device_time for e in ev) / CALLS, 1)


def _call(attn, q, k, v, dec, go) -> tuple:
    out = attn(q, k, v, decisions=dec)
    return (out, *torch.autograd.grad(out, (q, k, v), go))


def main(out: str, shapes: list, arms: list) -> None:
    rows = []
    for B, H, Hkv, D, T in shapes:
        g = torch.Generator("cuda").manual_seed(0)
        q, k, v = (torch.randn((B, h, T, D), generator=g, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for h in (H, Hkv, Hkv))  # fmt: skip
        go = torch.randn_like(q)
        for name in NAMES:
            # an op per arm: an arm may change the blocks its plan's index is built for
            attns = [ts.compile(PATTERNS[name].spec, causal=True, backend="triton") for _ in arms]
            dec = attns[0].decide(q, k)
            calls = [functools.partial(_call, a, q, k, v, dec, go) for a in attns]

            got = {}
            for arm in (0, 1):
                with override_config(**arms[arm]):
                    got[arm] = calls[arm]()
            res = {arm: {"fwd_us": [], "fwd_bwd_us": []} for arm in ("grid", "heavy_first")}
            for turn in range(4):  # two turns an arm, alternating
                for arm in ((0, 1) if turn % 2 == 0 else (1, 0)):
                    with override_config(**arms[arm]):
                        f, fb = kernel_us(calls[arm])
                    label = "heavy_first" if arm else "grid"
                    res[label]["fwd_us"].append(f)
                    res[label]["fwd_bwd_us"].append(fb)
            equal = all(torch.equal(a, b) for a, b in zip(got[0], got[1], strict=True))
            diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(got[0], got[1], strict=True))
            row = {"shape": [B, H, Hkv, D, T], "pattern": name, "equal": equal, "max_diff": diff, **res}
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                   "calls_a_turn": CALLS, "arms": arms, "rows": rows}, f, indent=1)
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    print(f"{'shape':22s} {'pattern':13s} | fwd µs grid / heavy-first (ratio) "
          "| fwd+bwd µs grid / heavy-first (ratio) | equal")
    for r in rows:
        a, b = med(r["grid"]["fwd_us"]), med(r["heavy_first"]["fwd_us"])
        c, d = med(r["grid"]["fwd_bwd_us"]), med(r["heavy_first"]["fwd_bwd_us"])
        print(f"{str(tuple(r['shape'])):22s} {r['pattern']:13s} | {a:7.1f} / {b:7.1f} ({b / a:.3f}) "
              f"| {c:8.1f} / {d:8.1f} ({d / c:.3f}) | {r['equal']} {r['max_diff']:.2g}")


if __name__ == "__main__":
    main(sys.argv[1], [tuple(int(x) for x in s.split("x")) for s in sys.argv[2].split(",")] if len(sys.argv) > 2
         else SHAPES, json.loads(sys.argv[3]) if len(sys.argv) > 3 else [{"heavy_first": 0}, {"heavy_first": 1}])
