"""The SDPA backend on the GPU: TopKFeatures groups as SDPA (cuDNN first) over q~ and k~,
outputs and gradients against the reference; auto sends a dense-layout TopKFeatures group there."""

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
