"""The Triton forward's and dQ's query blocks split over windows of their key tiles
(``TileConfig.fwd_split``, ``dq_split``) against unsplit kernels, kernels alone: per pattern,
shape and arm, the attention kernels' GPU time a forward and a forward+backward (the profiler, as
``ab_heavy_first.py``: every kernel whose name starts with ``_attn``; 20 calls a turn, two turns
an arm, the arms alternating) and the largest difference of the outputs and gradients from the
unsplit ones. bf16, causal, decisions given. An arm ``N`` splits the forward and dQ into N
windows, ``fN`` the forward only, ``NkM`` also dK/dV's key blocks into M windows of their query
tiles (``TileConfig.dkdv_split``), ``kM`` dK/dV only; every arm splits every group of every call
(``split_all``, ``split_programs``).

    python3 ab_split.py OUT.json SHAPES PATTERNS ARMS   (SHAPES: BxHxHkvxDxT,...; ARMS: f4,2,4,4k4,k2,...)
"""

import functools
import json
import sys

import torch
import triton

import tilesparse as ts
from tilesparse.backends.triton.op import override_config
from tilesparse.bench.grid import PATTERNS

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from ab_heavy_first import _call, kernel_us  # noqa: E402


def _arm(label: str) -> dict:
    blocks, _, keys = label.partition("k")
    n = int(blocks.lstrip("f") or 0)
    return {"fwd_split": n, "dq_split": 0 if label.startswith("f") else n, "dkdv_split": int(keys or 0),
            "split_programs": 10**9, "split_all": 1}


def main(out: str, shapes: list, names: list, splits: list) -> None:
    arms = [{"fwd_split": 0, "dq_split": 0, "dkdv_split": 0}] + [_arm(s) for s in splits]
    rows = []
    for B, H, Hkv, D, T in shapes:
        g = torch.Generator("cuda").manual_seed(0)
        q, k, v = (torch.randn((B, h, T, D), generator=g, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for h in (H, Hkv, Hkv))  # fmt: skip
        go = torch.randn_like(q)
        for name in names:
            attns = [ts.compile(PATTERNS[name].spec, causal=True, backend="triton") for _ in arms]
            dec = attns[0].decide(q, k)
            calls = [functools.partial(_call, a, q, k, v, dec, go) for a in attns]
            got = []
            for arm, call in zip(arms, calls):
                with override_config(**arm):
                    got.append(call())
            res = {i: {"fwd_us": [], "fwd_bwd_us": []} for i in range(len(arms))}
            for turn in range(2):
                for i in (range(len(arms)) if turn % 2 == 0 else reversed(range(len(arms)))):
                    with override_config(**arms[i]):
                        f, fb = kernel_us(calls[i])
                    res[i]["fwd_us"].append(f)
                    res[i]["fwd_bwd_us"].append(fb)
            diff = [max(float((a.float() - b.float()).abs().max()) for a, b in zip(got[0], x, strict=True))
                    for x in got]
            row = {"shape": [B, H, Hkv, D, T], "pattern": name, "arms": arms, "max_diff": diff,
                   "fwd_us": [min(r["fwd_us"]) for r in res.values()],
                   "fwd_bwd_us": [min(r["fwd_bwd_us"]) for r in res.values()], "turns": res}
            rows.append(row)
            print(json.dumps({k: row[k] for k in ("shape", "pattern", "fwd_us", "fwd_bwd_us", "max_diff")}), flush=True)
    with open(out, "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "triton": triton.__version__,
                   "arms": ["off", *splits], "rows": rows}, f, indent=1)
    print(f"{'shape':22s} {'pattern':13s} | fwd µs, arms " + " / ".join(["off", *splits])
          + " | fwd+bwd µs | max diff")
    for r in rows:
        print(f"{str(tuple(r['shape'])):22s} {r['pattern']:13s} | " + " / ".join(f"{x:.0f}" for x in r["fwd_us"])
              + " | " + " / ".join(f"{x:.0f}" for x in r["fwd_bwd_us"]) + f" | {max(r['max_diff']):.2g}")


if __name__ == "__main__":
    main(sys.argv[1], [tuple(int(x) for x in s.split("x")) for s in sys.argv[2].split(",")], sys.argv[3].split(","),
         sys.argv[4].split(","))
