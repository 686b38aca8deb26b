"""The reference backend: ``masked_attention`` against torch's SDPA with the same boolean mask
(outputs and gradients, grouped-query attention included), rows with no kept key giving zeros
and zero gradients (never NaN), the feature-sparse score, and the backend run through the IR's
mask equal to ``attn.reference``.

Property tests, T <= 64; CPU only.
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.backends.reference import feature_mask, masked_attention
from tilesparse.testing import assert_equivalent, attention_inputs, decisions, specs


def grads(out, inputs, upstream):
    return torch.autograd.grad(out, inputs, upstream)


@settings(max_examples=40)
@given(data=st.data())
def test_masked_attention_equals_sdpa_where_every_row_keeps_a_key(data):
    q, k, v = data.draw(attention_inputs(seqlen=st.integers(1, 64), dtype=torch.float32))
    B, H, T, _ = q.shape
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 99)))
    mask = torch.rand(B, H, T, T, generator=g) < data.draw(st.sampled_from([0.1, 0.5, 0.9]))
    mask[..., 0] = True  # every row keeps a key: SDPA is defined there
    scale = data.draw(st.sampled_from([None, 0.3]))
    ours = masked_attention(q, k, v, mask, scale=scale or q.shape[-1] ** -0.5, precision=torch.float64)
    theirs = F.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
    )
    assert ours.dtype == torch.float64
    torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-10)
    up = torch.randn(ours.shape, generator=g, dtype=torch.float64)
    for a, b in zip(grads(ours, (q, k, v), up), grads(theirs, (q, k, v), up), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_a_row_without_keys_gives_zeros_and_zero_gradients():
    q, k, v = (torch.randn(1, 2, 6, 8, requires_grad=True) for _ in range(3))
    mask = torch.ones(1, 2, 6, 6, dtype=torch.bool).tril()
    mask[0, 1, 3] = False  # head 1, query 3 keeps nothing
    out = masked_attention(q, k, v, mask, scale=0.5)
    assert torch.isfinite(out).all() and not out[0, 1, 3].any()
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), torch.randn_like(out))
    assert all(torch.isfinite(t).all() for t in (dq, dk, dv))
    assert not dq[0, 1, 3].any()
    out2 = masked_attention(q, k, v, torch.zeros_like(mask), scale=0.5)
    assert not out2.any()
    assert not any(t.any() for t in torch.autograd.grad(out2, (q, k, v), torch.randn_like(out2)))


def test_feature_masks_zero_the_unkept_features():
    q, k, v = (torch.randn(1, 1, 5, 8) for _ in range(3))
    sq = torch.tensor([0, 3]).expand(1, 1, 5, 2)
    sk = torch.tensor([3, 7]).expand(1, 1, 5, 2)
    fq, fk = feature_mask(sq, 8, torch.float32), feature_mask(sk, 8, torch.float32)
    assert fq[0, 0, 0].tolist() == [1, 0, 0, 1, 0, 0, 0, 0]
    out = masked_attention(q, k, v, None, scale=1.0, q_features=fq, k_features=fk)
    # only feature 3 is kept on both sides: the score is q[..., 3] * k[..., 3]
    s = q[..., 3:4] @ k[..., 3:4].transpose(-1, -2)
    torch.testing.assert_close(out, torch.softmax(s, -1) @ v)


@settings(max_examples=30)
@given(data=st.data())
def test_the_reference_backend_equals_attn_reference(data):
    q, k, v = data.draw(attention_inputs(seqlen=st.integers(1, 64)))
    spec = data.draw(specs(heads=q.shape[1], max_k=q.shape[-1]))
    dec = data.draw(decisions(spec, q.shape))
    attn = ts.compile(spec, causal=data.draw(st.booleans()), backend="reference")
    assert_equivalent(attn, q, k, v, decisions=dec)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_dense_reference_is_sdpa(causal, dtype):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, 37, 16, generator=g).to(dtype) for _ in range(3))
    k, v = k[:, :2], v[:, :2]
    attn = ts.compile(ts.Dense(), causal=causal, backend="reference")
    ref = attn.reference(q, k, v)
    assert ref.dtype == torch.float32 and attn.reference(q, k, v, precision=torch.float64).dtype == torch.float64
    sdpa = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=causal, enable_gqa=True)
    torch.testing.assert_close(ref, sdpa, atol=1e-5, rtol=1e-5)
    out = attn(q, k, v)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), sdpa, atol=ts.backends.REGISTRY["reference"].ERROR_ATOL[dtype], rtol=0)
