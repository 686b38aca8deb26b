"""A PerHead's dense heads fused into its rest's group, built by the Triton index build's sort
launch itself (``index.bind_group(dense_heads=...)``) on the GPU: the fused plan's outputs and
gradients bit for bit those of the build from decisions filled every call
(``execute.filled_dense_heads``), with a bucket predicate, a keep one and both, at a length no
multiple of a block and at 4k, with GQA; and within the masked dense reference."""

from __future__ import annotations

import contextlib

import pytest
import torch

import tilesparse as ts
from tilesparse.execute import filled_dense_heads
from tilesparse.testing import assert_equivalent

from builtin_specs import cuda_inputs

RESTS = {"hash": ts.Hash(buckets=16), "qkdrop": ts.QKDrop(keep=0.5),
         "hybrid": ts.Hybrid(parts=[ts.Hash(buckets=8), ts.QKDrop(keep=0.7)])}


@pytest.mark.parametrize("shape", [(1, 16, 16, 64, 4096), (2, 8, 2, 64, 1000), (1, 32, 8, 128, 4096)],
                         ids=["D64_4k", "D64_GQA_1000", "D128_GQA_4k"])
@pytest.mark.parametrize("rest", sorted(RESTS))
def test_dense_heads_built_by_the_sort_are_the_filled_build(rest, shape):
    q, k, v = cuda_inputs(shape, grad=True)
    go = torch.randn_like(q)
    spec = ts.PerHead(dense_heads=[0, 3], rest=RESTS[rest])
    attn = ts.compile(spec, causal=True, backend="triton")
    (a,) = attn.plan(q, k, v).assignments  # fused: one group, the dense heads in its launch
    assert a.dense_heads == (0, 3), attn.explain(q, k, v)
    dec = attn.decide(q, k)
    got = []
    for filled in (False, True):
        with filled_dense_heads() if filled else contextlib.nullcontext():
            out = attn(q, k, v, decisions=dec)
            got.append((out, *torch.autograd.grad(out, (q, k, v), go)))
    for x, y, what in zip(*got, ("out", "dq", "dk", "dv"), strict=True):
        assert torch.equal(x, y), (rest, what)
    if shape[-1] <= 1000:  # T
        assert_equivalent(attn, q, k, v, decisions=dec)
