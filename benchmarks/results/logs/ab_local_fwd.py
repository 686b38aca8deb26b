"""The Triton forward at D <= 64 sanitizing in its own launch (nonfinite.py, ``local``)
against its launch pair (``sanitize_in_pairs``), on the GPU: per pattern and shape, the forward's kernels' GPU time a
call (the profiler: every kernel whose name starts with ``_attn_fwd``, the pair's two launches
summed, over 40 calls a turn, two turns an arm, the arms alternating), the call's back-to-back
time (``triton.testing.do_bench``, GPU-bound at 16k and more), and whether the outputs are
equal bit for bit. Decisions given, bf16, causal, no gradient. The local forward is bound at
every length here (``op.LOCAL_MAX_KEYS`` raised), the pair arm inside ``sanitize_in_pairs``.

    python3 benchmarks/results/logs/ab_local_fwd.py OUT.json
"""

import contextlib
import json
import sys

import torch
import triton
from triton.testing import do_bench

import tilesparse as ts
from tilesparse.backends.triton import op
from tilesparse.backends.triton.nonfinite import sanitize_in_pairs
from tilesparse.bench.grid import PATTERNS

SHAPES = [(1, 16, 16, 64, 4096), (2, 12, 12, 64, 16384), (1, 16, 16, 64, 32768)]
NAMES = ["dense-triton", "keep0.7", "keep0.5", "hash16", "hash64"]
CALLS = 40


def fwd_kernel_us(fn) -> float:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            fn()
        torch.cuda.synchronize()
    return sum(e.device_time for e in prof.events() if e.name.startswith("_attn_fwd")) / CALLS


def main(out: str) -> None:
    op.LOCAL_MAX_KEYS = 1 << 30  # read when a call signature's launches are bound
    rows = []
    for B, H, Hkv, D, T in SHAPES:
        g = torch.Generator("cuda").manual_seed(0)
        q, k, v = (torch.randn((B, h, T, D), generator=g, device="cuda", dtype=torch.bfloat16) for h in (H, Hkv, Hkv))
        for name in NAMES:
            attn = ts.compile(PATTERNS[name].spec, causal=True, backend="triton")
            dec = attn.decide(q, k)

            def fn(attn=attn, dec=dec):
                with torch.no_grad():
                    return attn(q, k, v, decisions=dec)

            outs = {"local": fn()}
            with sanitize_in_pairs():
                outs["pair"] = fn()
            res = {"pair": {"kernel_us": [], "b2b_us": []}, "local": {"kernel_us": [], "b2b_us": []}}
            for turn in range(4):  # two turns an arm, alternating
                for arm in (("pair", "local") if turn % 2 == 0 else ("local", "pair")):
                    ctx = sanitize_in_pairs() if arm == "pair" else contextlib.nullcontext()
                    with ctx:
                        res[arm]["kernel_us"].append(round(fwd_kernel_us(fn), 1))
                        res[arm]["b2b_us"].append(round(1e3 * do_bench(fn, warmup=25, rep=100), 1))
            row = {"shape": [B, H, Hkv, D, T], "pattern": name, "equal": torch.equal(outs["pair"], outs["local"]), **res}
            rows.append(row)
            print(json.dumps(row), flush=True)
    with open(out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                   "rows": rows}, f, indent=1)
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    print(f"{'shape':24s} {'pattern':13s} | kernel us pair / local (ratio) | b2b us pair / local | equal")
    for r in rows:
        kp, kl = med(r["pair"]["kernel_us"]), med(r["local"]["kernel_us"])
        bp, bl = med(r["pair"]["b2b_us"]), med(r["local"]["b2b_us"])
        print(f"{str(tuple(r['shape'])):24s} {r['pattern']:13s} | {kp:8.1f} / {kl:8.1f} ({kl / kp:.3f}) "
              f"| {bp:8.1f} / {bl:8.1f} | {r['equal']}")


if __name__ == "__main__":
    main(sys.argv[1])
