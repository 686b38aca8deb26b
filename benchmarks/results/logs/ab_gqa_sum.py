"""The backward's sum of per-query-head dK/dV into the kv heads (backends/triton/gqa.py), the
kernel before (commit e2800bd's gqa.py, walking the head map, 1,024 elements a program: read
from git and loaded as its own module) against today's, which unrolls the group of every query
head in order (``in_order=True``) and also walks the head map (``in_order=False``), both 2,048
elements a program. Per shape: each kernel's GPU time from the profiler (median of 20 calls)
and back to back (``do_bench``, L2 flushed), the bytes moved and the bandwidth, and whether
the outputs equal the old kernel's bit for bit.

    python3 benchmarks/results/logs/ab_gqa_sum.py OUT.json
"""

import json
import sys
from pathlib import Path

import torch
import triton

from tilesparse.backends.triton import gqa

sys.path.insert(0, str(Path(__file__).resolve().parent))
from old_kernels import module_at, profiled_us  # noqa: E402

SHAPES = [(1, 32, 8, 128, 4096), (1, 32, 8, 128, 16384), (1, 32, 8, 128, 32768), (2, 12, 4, 64, 16384),
          (1, 32, 8, 64, 4096), (1, 64, 8, 128, 8192)]


def main(out: str) -> None:
    old = module_at("e2800bd", "tilesparse/backends/triton/gqa.py", "tilesparse.backends.triton")
    rows = []
    for B, H, Hkv, D, T in SHAPES:
        g = torch.Generator("cuda").manual_seed(0)
        dk, dv = (torch.randn((B, H, T, D), generator=g, device="cuda") for _ in range(2))
        k = v = torch.empty((B, Hkv, T, D), dtype=torch.bfloat16, device="cuda")
        head_map = torch.arange(H, dtype=torch.int32, device="cuda")
        arms = {
            "old": lambda: old.sum_into_kv_heads(dk, dv, head_map, H, k, v),
            "new_head_map": lambda: gqa.sum_into_kv_heads(dk, dv, head_map, H, k, v, in_order=False),
            "new_in_order": lambda: gqa.sum_into_kv_heads(dk, dv, head_map, H, k, v, in_order=True),
        }
        ref = arms["old"]()
        moved = 2 * dk.numel() * 4 + 2 * k.numel() * 2
        row = {"shape": [B, H, Hkv, D, T], "bytes": moved}
        for name, fn in arms.items():
            outs = fn()
            row[name] = {
                "profiler_us": profiled_us(fn, "_sum_into_kv_heads"),
                "do_bench_us": triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median") * 1e3,
                "equal_to_old": all(torch.equal(a, b) for a, b in zip(outs, ref, strict=True)),
            }
            row[name]["TB_per_s"] = moved / row[name]["profiler_us"] / 1e6
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                     "triton": triton.__version__, "rows": rows}, indent=1))
    print(f"{'shape':22s} {'MB':>6s} | {'old us':>7s} {'head map':>8s} {'in order':>8s} | TB/s old / in order | equal")
    for r in rows:
        o, m, n = r["old"], r["new_head_map"], r["new_in_order"]
        print(f"{str(tuple(r['shape'])):22s} {r['bytes'] / 1e6:6.0f} | {o['profiler_us']:7.1f} {m['profiler_us']:8.1f} "
              f"{n['profiler_us']:8.1f} | {o['TB_per_s']:.2f} / {n['TB_per_s']:.2f} | {m['equal_to_old'] and n['equal_to_old']}")


if __name__ == "__main__":
    main(sys.argv[1])
