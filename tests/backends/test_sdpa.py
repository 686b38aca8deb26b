"""The SDPA backend on the CPU: dense groups, and TopKFeatures groups as SDPA over the
sparsified q~ and k~, outputs and gradients against the reference (GQA, PerHead, causal or not)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.backends.base import REGISTRY
from tilesparse.ir import check_inputs, lower
from tilesparse.testing import assert_equivalent

SPECS = [
    ts.Dense(),
    ts.TopKFeatures(k=4),
    ts.TopKFeatures(k=16),
    ts.PerHead(dense_heads=[0], rest=ts.TopKFeatures(k=8)),
]


@settings(max_examples=16, deadline=None)
@given(
    spec=st.sampled_from(SPECS),
    causal=st.booleans(),
    T=st.integers(1, 70),
    heads=st.sampled_from([(4, 4), (4, 2), (4, 1)]),
    dtype=st.sampled_from([torch.float32, torch.bfloat16]),
    seed=st.integers(0, 2**31 - 1),
)
def test_sdpa_matches_the_reference(spec, causal, T, heads, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    H, Hkv = heads
    q = torch.randn((2, H, T, 16), generator=g, dtype=dtype).requires_grad_()
    k, v = (torch.randn((2, Hkv, T, 16), generator=g, dtype=dtype).requires_grad_() for _ in range(2))
    attn = ts.compile(spec, causal=causal, backend="sdpa")
    assert_equivalent(attn, q, k, v, decisions=attn.decide(q, k, generator=g))


def test_a_feature_group_without_decisions_is_an_error():
    q = k = v = torch.randn(1, 2, 8, 16)
    group = lower(ts.TopKFeatures(k=4), causal=True).groups[0]
    with pytest.raises(ValueError, match="pass decisions= with q_support and k_support"):
        REGISTRY["sdpa"].attend_heads(group, (0, 1), check_inputs(q, k, v))
