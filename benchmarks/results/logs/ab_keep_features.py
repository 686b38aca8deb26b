"""TopKFeatures' q~ and k~ kernel (backends/triton/features.py ``_keep_features``) before and after
its rows' kept ids are read in one 2D load and OR-reduced into bit words (they were read one id
at a time, n_keep dependent loads a row), and with twice the rows a program: each of the four
launches of a forward+backward (q~, k~ repeated per query head, their gradients, dK summed over
each kv head's query heads) at #12's shapes with k=8, bf16. The kernel before is commit
c8ec1d3's features.py (from git, or build/features_c8ec1d3.py where the tree has no history),
loaded as its own module. Each kernel also with twice the rows a program (``_TILE`` doubled). Per
launch: GPU time from the profiler (median of 20) and whether the output equals the old kernel's
bit for bit.

    python3 benchmarks/results/logs/ab_keep_features.py OUT.json
"""

import json
import sys
from pathlib import Path

import torch
import triton

from tilesparse.backends.triton import features
from tilesparse.ir.prepare import head_slots

sys.path.insert(0, str(Path(__file__).resolve().parent))
from old_kernels import module_at, profiled_us  # noqa: E402

SHAPES = [(1, 32, 8, 128, 4096), (1, 32, 8, 128, 16384), (1, 16, 16, 64, 4096), (2, 12, 12, 64, 16384),
          (2, 12, 12, 128, 16384)]
K = 8


def main(out: str) -> None:
    old = module_at("c8ec1d3", "tilesparse/backends/triton/features.py", "tilesparse.backends.triton")
    rows = []
    for B, H, Hkv, D, T in SHAPES:
        g = torch.Generator("cuda").manual_seed(0)
        bf = dict(device="cuda", dtype=torch.bfloat16)
        q = torch.randn((B, H, T, D), generator=g, **bf)
        k = torch.randn((B, Hkv, T, D), generator=g, **bf)
        gq = torch.randn((B, H, T, D), generator=g, **bf)
        sup = [torch.rand((B, H, T, D), generator=g, device="cuda").argsort(-1)[..., :K].to(torch.int32) for _ in range(2)]
        slots = head_slots(tuple(range(H)), H, torch.device("cuda"))
        group = H // Hkv
        launches = {  # (x, support, heads_out, n_src, x_div)
            "q~": (q, sup[0], H, 1, 1), "k~": (k, sup[1], H, 1, group),
            "dq": (gq, sup[0], H, 1, 1), "dk": (gq, sup[1], Hkv, group, 1),
        }
        row = {"shape": [B, H, Hkv, D, T], "k": K}
        for name, (x, s, heads_out, n_src, x_div) in launches.items():
            arms = {"old": lambda: old._launch(x, s, slots, heads_out, n_src, x_div, x.dtype),
                    "new": lambda: features._launch(x, s, slots, heads_out, n_src, x_div, x.dtype)}
            ref = arms["old"]()
            res = {}
            for arm, fn in arms.items():
                res[arm] = {"us": profiled_us(fn, "_keep_features"), "equal_to_old": torch.equal(fn(), ref)}
            for arm, mod in (("old", old), ("new", features)):  # twice the rows a program (the tile's elements)
                tile = mod._TILE
                mod._TILE = 2 * tile
                try:
                    res[f"{arm}_2x_rows"] = {"us": profiled_us(arms[arm], "_keep_features"), "equal_to_old": torch.equal(arms[arm](), ref)}
                finally:
                    mod._TILE = tile
            res["bytes"] = x.numel() * 2 + heads_out * (x.numel() // x.shape[1]) * 2
            row[name] = res
        rows.append(row)
        print(json.dumps(row), flush=True)
    Path(out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                     "triton": triton.__version__, "rows": rows}, indent=1))
    arms = ("old", "old_2x_rows", "new", "new_2x_rows")
    print(f"{'shape':22s} launch | " + " ".join(f"{a:>11s}" for a in arms) + " | equal (us)")
    for r in rows:
        for name in ("q~", "k~", "dq", "dk"):
            x = r[name]
            eq = all(x[a]["equal_to_old"] for a in arms)
            print(f"{str(tuple(r['shape'])):22s} {name:6s} | " + " ".join(f"{x[a]['us']:11.1f}" for a in arms) + f" | {eq}")


if __name__ == "__main__":
    main(sys.argv[1])
