"""The index build's sort kernels (backends/triton/index.py: ``_sort_scatter`` at up to
``_FUSED_SORT_ROWS`` rows a side, ``_sort_keys`` and the scatter above) before and after they
took the dense-heads flag (commit 1a7cdc3's index.py, read from git and loaded as its own module,
against today's): sm_90 compiles moved their registers (18-165 -> 22-107, none spilling), so
this times them. Per pattern and shape: the GPU time of every kernel named ``_sort*`` and
``_scatter*`` a build launches, from the profiler (median of 20 builds), for each arm, and
whether the index tensors equal the old build's bit for bit. PerHead's row is the fused group:
the old build on decisions filled every call (``execute.with_dense_heads``), the new one with
``dense_heads`` (its own flag).

    python3 benchmarks/results/logs/ab_sort_kernels.py OUT.json
    TRITON_INTERPRET=1 python3 benchmarks/results/logs/ab_sort_kernels.py OUT.json --smoke   # CPU: equality only
"""

import argparse
import json
import sys
from pathlib import Path

import torch

import tilesparse as ts
from tilesparse.backends.triton import index
from tilesparse.execute import with_dense_heads
from tilesparse.ir import AttentionInputs, lower
from tilesparse.testing.index import INDEX_FIELDS

sys.path.insert(0, str(Path(__file__).resolve().parent))
from old_kernels import module_at, profiled_us  # noqa: E402

SPECS = {"keep0.7": ts.QKDrop(keep=0.7), "hash16": ts.Hash(buckets=16), "hash64": ts.Hash(buckets=64),
         "hybrid": ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.5)]),
         "perhead": ts.PerHead(dense_heads=[0], rest=ts.Hash(buckets=16))}
SHAPES = [(1, 16, 64, 4096), (1, 32, 128, 4096), (2, 12, 64, 16384), (1, 16, 64, 32768)]
SMOKE_SHAPES = [(1, 3, 16, 70), (2, 3, 16, 130)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny shapes, equality only")
    a = ap.parse_args()
    dev = torch.device("cpu" if a.smoke else "cuda")
    old = module_at("1a7cdc3", "tilesparse/backends/triton/index.py", "tilesparse.backends.triton")
    rows = []
    for B, H, D, T in SMOKE_SHAPES if a.smoke else SHAPES:
        g = torch.Generator(dev).manual_seed(0)
        dtype = torch.float32 if a.smoke else torch.bfloat16
        q, k = (torch.randn(B, H, T, D, generator=g, device=dev, dtype=dtype) for _ in range(2))
        inputs = AttentionInputs(q, k, k, scale=1.0)
        for name, spec in SPECS.items():
            attn = ts.compile(spec, causal=True, backend="triton")
            dec = attn.decide(q, k)
            program = lower(spec, causal=True, block_q=16 if a.smoke else 128, block_k=16 if a.smoke else 64)
            group = next(gr for gr in program.groups if gr.heads is None)  # the rest: every head, fused
            heads, dense = tuple(range(H)), tuple(getattr(spec, "dense_heads", ()))
            old_build = old.bind_group(program, group, heads, inputs)
            new_build = index.bind_group(program, group, heads, inputs, dense)
            filled = with_dense_heads(dec, dense)
            arms = {"old": lambda: old_build(filled, inputs), "new": lambda: new_build(dec, inputs)}
            want, got = arms["old"](), arms["new"]()
            row = {"pattern": name, "shape": [B, H, D, T],
                   "equal": all(torch.equal(getattr(want, f), getattr(got, f)) for f in INDEX_FIELDS)}
            if not a.smoke:
                for arm, fn in arms.items():
                    row[arm] = {kern: profiled_us(fn, kern) for kern in ("_sort_scatter", "_sort_keys", "_scatter_sorted")}
            rows.append(row)
            print(json.dumps(row), flush=True)
    a.out.write_text(json.dumps({"device": str(dev) if a.smoke else torch.cuda.get_device_name(), "rows": rows}, indent=1))
    assert all(r["equal"] for r in rows), "an index tensor differs from the old build's"


if __name__ == "__main__":
    main()
