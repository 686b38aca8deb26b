"""The SDPA backend on the GPU: TopKFeatures groups as SDPA (cuDNN first) over q~ and k~,
outputs and gradients against the reference (a group of every head makes q~ and k~ with
Triton's feature kernel, a PerHead group with torch ops); an inf in an unkept feature stays out
of the output; auto sends a dense-layout TopKFeatures group there."""

from __future__ import annotations

import pytest
import torch

import tilesparse as ts
from tilesparse.testing import assert_equivalent

DEVICE = torch.device("cuda")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2)])
@pytest.mark.parametrize("spec", [ts.TopKFeatures(k=8), ts.PerHead(dense_heads=[0], rest=ts.TopKFeatures(k=16))], ids=str)
def test_sdpa_topk_features_matches_the_reference(spec, heads, dtype):
    torch.manual_seed(0)
    H, Hkv = heads
    q = torch.randn((2, H, 1000, 64), device=DEVICE, dtype=dtype, requires_grad=True)
    k, v = (torch.randn((2, Hkv, 1000, 64), device=DEVICE, dtype=dtype, requires_grad=True) for _ in range(2))
    attn = ts.compile(spec, causal=True, backend="sdpa")
    assert_equivalent(attn, q, k, v, decisions=attn.decide(q, k))


def test_auto_sends_dense_layout_topk_features_to_sdpa():
    q, k, v = (torch.randn((2, 12, 16384, 64), device=DEVICE, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    plan = ts.compile(ts.TopKFeatures(k=8)).plan(q, k, v)
    assert [a.backend.NAME for a in plan.assignments] == ["sdpa"], plan.describe()


def test_an_inf_in_an_unkept_feature_stays_out():
    """q~ and k~ by Triton's feature kernel select the kept features: an inf elsewhere leaves the
    output finite and equal to the reference's (0 * inf would make it NaN)."""
    g = torch.Generator(DEVICE).manual_seed(0)
    q = torch.randn((1, 8, 1000, 64), device=DEVICE, dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn((1, 2, 1000, 64), device=DEVICE, dtype=torch.bfloat16, generator=g) for _ in range(2))
    attn = ts.compile(ts.TopKFeatures(k=8), causal=True, backend="sdpa")
    dec = attn.decide(q, k, generator=g)
    unkept_q = next(f for f in range(64) if f not in dec.q_support[0, 3, 500].tolist())
    unkept_k = next(f for f in range(64) if f not in dec.k_support[0, 4:8, 200].flatten().tolist())
    q[0, 3, 500, unkept_q] = float("inf")
    k[0, 1, 200, unkept_k] = float("inf")  # kv head 1 serves query heads 4 to 7
    out = attn(q, k, v, decisions=dec)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), attn.reference(q, k, v, decisions=dec).float(), rtol=2e-2, atol=2e-2)
