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


def _feature_call(H=4, Hkv=2, T=24, D=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn((2, H, T, D), generator=g)
    k, v = (torch.randn((2, Hkv, T, D), generator=g) for _ in range(2))
    attn = ts.compile(ts.TopKFeatures(k=4), causal=True, backend="sdpa")
    return attn, q, k, v, attn.decide(q, k, generator=g)


def test_both_ways_of_making_q_and_k_sparse_agree():
    """A group of every head makes q~ and k~ with Triton's feature kernel (here under the
    interpreter); a q strided along D takes the torch ops: the same outputs and gradients."""
    from tilesparse.backends import sdpa

    attn, q, k, v, dec = _feature_call()
    inputs = check_inputs(q, k, v)
    strided = check_inputs(q.transpose(-1, -2).contiguous().transpose(-1, -2), k, v)
    assert strided.q.stride(-1) != 1
    supports = (dec.q_support.to(torch.int32), dec.k_support.to(torch.int32))
    kernel = sdpa._sparsified(inputs, (0, 1, 2, 3), *supports)
    ops = sdpa._sparsified(strided, (0, 1, 2, 3), *supports)
    for a, b in zip(kernel, ops, strict=True):
        assert a.shape == b.shape == (2, 4, 24, 16)
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_signature_binds_the_feature_launches_once(monkeypatch):
    """A TopKFeatures group of every head makes q~ and k~ through the launches its signature
    bound (``BoundFeatures.pair``: both sides under one autograd node), not ``keep_features``
    per side and call, from the signature's second call on; outputs and gradients bitwise those
    of the per-call path (``unbound_features``) and of a q strided along D (the torch ops)."""
    from tilesparse.backends.triton import features

    pairs, per_side = [], []
    real_pair, real_keep = features.BoundFeatures.pair, features.keep_features
    monkeypatch.setattr(features.BoundFeatures, "pair", lambda *a: pairs.append(1) or real_pair(*a))
    monkeypatch.setattr(features, "keep_features", lambda *a: per_side.append(1) or real_keep(*a))
    attn, q, k, v, dec = _feature_call()
    q, k, v = (t.requires_grad_() for t in (q, k, v))

    def run(q=q):
        out = attn(q, k, v, decisions=dec)
        return (out, *torch.autograd.grad(out.square().sum(), (q, k, v)))

    bound = [run() for _ in range(3)]
    assert len(pairs) >= 2 and per_side == []
    with features.unbound_features():
        unbound = run()
    assert per_side == [1, 1]
    strided = run(q.detach().transpose(-1, -2).contiguous().transpose(-1, -2).requires_grad_())
    for got in (*bound[1:], unbound):
        for a, b in zip(bound[0], got, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    for a, b in zip(bound[0], strided, strict=True):
        torch.testing.assert_close(a, b)


def test_an_inf_in_an_unkept_feature_stays_out():
    """As in the reference: q~ and k~ select the kept features, so an inf elsewhere does not
    become 0 * inf = NaN (the torch ops' product would)."""
    attn, q, k, v, dec = _feature_call()
    unkept_q = next(f for f in range(16) if f not in dec.q_support[0, 0, 5].tolist())
    unkept_k = next(f for f in range(16) if f not in dec.k_support[1, 2:4, 7].flatten().tolist())
    q[0, 0, 5, unkept_q] = float("inf")
    k[1, 1, 7, unkept_k] = float("-inf")  # kv head 1 serves query heads 2 and 3
    out = attn(q, k, v, decisions=dec)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, attn.reference(q, k, v, decisions=dec), rtol=1e-4, atol=1e-5)


def test_cudnn_first_sets_the_priority_for_the_call_and_puts_the_callers_back():
    """The call runs with cuDNN first, then flash, efficient and math, then the caller's others;
    after it (an error included) the caller's order is back and no backend's flag has moved."""
    from tilesparse.backends.sdpa import CUDA_PRIORITY, cudnn_first

    want = [int(b) for b in CUDA_PRIORITY]
    flags = (torch.backends.cuda.flash_sdp_enabled, torch.backends.cuda.math_sdp_enabled)
    before_flags = [f() for f in flags]
    previous = torch._C._get_sdp_priority_order()
    theirs = list(reversed(previous))  # another order of the caller's, cuDNN not first
    torch._C._set_sdp_priority_order(theirs)
    try:
        seen = cudnn_first(torch._C._get_sdp_priority_order)
        assert seen[: len(want)] == want and sorted(seen) == sorted(theirs)
        assert [b for b in seen if b not in want] == [b for b in theirs if b not in want]
        assert torch._C._get_sdp_priority_order() == theirs

        def fails():
            raise RuntimeError("no kernel")

        with pytest.raises(RuntimeError, match="no kernel"):
            cudnn_first(fails)
        assert torch._C._get_sdp_priority_order() == theirs
        assert [f() for f in flags] == before_flags
        torch._C._set_sdp_priority_order(seen)  # already cuDNN's first: left as it is
        assert cudnn_first(torch._C._get_sdp_priority_order) == seen
    finally:
        torch._C._set_sdp_priority_order(previous)
