"""On CUDA, TopKFeatures' q~ and k~ made through the bound launches (``features.BoundFeatures``,
one autograd node for both sides, the group copied per lent index buffer with the call's
supports) give what the per-call path (``unbound_features``) gives, output and gradients bit
for bit, with fresh decisions each call; bf16, grouped-query attention and not, a PerHead whose
rest is TopKFeatures."""

from __future__ import annotations

import pytest
import torch

import tilesparse as ts
from tilesparse.backends.triton.features import unbound_features

from builtin_specs import GPU_SHAPES, cuda_inputs

SPECS = {
    "topk": ts.TopKFeatures(k=8),
    "perhead-topk": ts.PerHead(dense_heads=[1], rest=ts.TopKFeatures(k=8)),
}


@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", sorted(SPECS))
def test_bound_features_match_the_per_call_path(name, shape):
    attn = ts.compile(SPECS[name], causal=True, backend="triton")
    q, k, v = cuda_inputs(shape, grad=True)
    go = torch.randn_like(q)
    for seed in range(3):  # a new binding, a kept one, a reused one; new decisions each call
        dec = attn.decide(q, k, generator=torch.Generator(device="cuda").manual_seed(seed))
        out = attn(q, k, v, decisions=dec)
        got = (out, *torch.autograd.grad(out, (q, k, v), go))
        with unbound_features():
            out = attn(q, k, v, decisions=dec)
            want = (out, *torch.autograd.grad(out, (q, k, v), go))
        for a, b in zip(got, want, strict=True):
            assert torch.equal(a, b), (name, seed)
        with torch.no_grad():
            assert torch.equal(attn(q, k, v, decisions=dec), got[0]), (name, seed)
