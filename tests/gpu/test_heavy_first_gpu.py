"""The attention kernels' programs started longest first (``TileConfig.heavy_first``,
kernels._scheduled and its Gluon twin) on the GPU: outputs and gradients bit for bit those of the
grid's own order, in every kernel a call takes (the Triton forward, dQ and dK/dV and the
warp-specialized ones at D=64 and D=128 with GQA), at a length no multiple of a block and at 4k."""

from __future__ import annotations

import pytest
import torch

import tilesparse as ts
from tilesparse.backends.triton.op import override_config

from builtin_specs import cuda_inputs

SPECS = {"dense": ts.Dense(), "qkdrop": ts.QKDrop(keep=0.5), "hash": ts.Hash(buckets=16),
         "perhead": ts.PerHead(dense_heads=[0], rest=ts.Hash(buckets=16))}


@pytest.mark.parametrize("shape", [(1, 16, 16, 64, 4096), (1, 8, 2, 64, 1000), (1, 32, 8, 128, 4096),
                                   (1, 8, 2, 128, 1000)],
                         ids=["D64_4k", "D64_GQA_1000", "D128_GQA_4k", "D128_GQA_1000"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_longest_first_gives_the_grids_order_results(name, shape):
    q, k, v = cuda_inputs(shape, grad=True)
    go = torch.randn_like(q)
    attn = ts.compile(SPECS[name], causal=True, backend="triton")
    dec = attn.decide(q, k)
    got = {}
    for order in (0, 1):
        with override_config(heavy_first=order):
            out = attn(q, k, v, decisions=dec)
            got[order] = (out, *torch.autograd.grad(out, (q, k, v), go))
    for a, b, what in zip(got[0], got[1], ("out", "dq", "dk", "dv"), strict=True):
        assert torch.equal(a, b), (name, what)
