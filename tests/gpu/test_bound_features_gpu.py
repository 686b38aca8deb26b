"""On CUDA, TopKFeatures' q~ and k~ made through the bound launches (``features.BoundFeatures``,
one autograd node for both sides, the group copied per lent index buffer with the call's
supports) give what the per-call path (``unbound_features``) gives, output and gradients bit
for bit, with fresh decisions each call; bf16, grouped-query attention and not, a PerHead whose
rest is TopKFeatures. Both sides' launch (``_keep_features_pair``) writes bit for bit what a
launch a side (``sides_apart``) writes, forward and backward, for Tq < Tk too."""

from __future__ import annotations

import pytest
import torch

import tilesparse as ts
from tilesparse.backends.triton import features
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


@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("q_len", ["tq=tk", "tq<tk"])
def test_both_sides_in_one_launch_match_a_launch_a_side(shape, q_len):
    B, H, Hkv, D, T = shape
    q, k, _ = cuda_inputs(shape, grad=False)
    if q_len == "tq<tk":
        q = q[:, :, : T // 3 + 1]
    heads = tuple(range(1, H, 2))
    g = torch.Generator(device="cuda").manual_seed(1)
    sq, sk = (torch.rand((B, len(heads), x.shape[2], D), device="cuda", generator=g).argsort(-1)[..., :8].int()
              for x in (q, k))  # fmt: skip
    bound = features.BoundFeatures(heads, q, k)
    dq_kept, dk_kept = (torch.randn((B, H, x.shape[2], D), device="cuda", dtype=x.dtype, generator=g) for x in (q, k))
    got = (*bound.keep(q, k, sq, sk), *bound.grads(dq_kept, dk_kept, sq, sk))
    with features.sides_apart():
        want = (*bound.keep(q, k, sq, sk), *bound.grads(dq_kept, dk_kept, sq, sk))
    for name, a, b in zip(("q~", "k~", "dq", "dk"), got, want, strict=True):
        assert torch.equal(a, b), (name, shape, q_len)
