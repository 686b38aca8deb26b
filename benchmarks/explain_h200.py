"""explain() of three representative specs at the target size (B=2, H=12, T=16,384, D=64, bf16,
gradients needed; before any call): the README's H200 block.

    python3 benchmarks/explain_h200.py > benchmarks/results/explain_h200.txt
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

import tilesparse as ts  # noqa: E402

SPECS = (
    ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)]),
    ts.PerHead(dense_heads=[0, 1], rest=ts.Hash(buckets=16)),
    ts.Hash(buckets=1),
)

if __name__ == "__main__":
    g = torch.Generator("cuda").manual_seed(0)
    q, k, v = (
        torch.randn((2, 12, 16384, 64), generator=g, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        for _ in range(3)
    )
    for spec in SPECS:
        print(ts.compile(spec).explain(q, k, v))
        print()
