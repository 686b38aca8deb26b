"""SDPA's keyword arguments on a compiled op (scale, is_causal, enable_gqa, attn_mask,
dropout_p), ``return_lse``, and the op's own randomness (seed, resample). CPU only."""

import pytest
import torch
import torch.nn.functional as F

import tilesparse as ts


def _qkv(B=2, H=4, Hkv=2, T=40, D=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, H, T, D, generator=g), torch.randn(B, Hkv, T, D, generator=g), torch.randn(B, Hkv, T, D, generator=g)


@pytest.mark.parametrize("backend", ["sdpa", "triton"])
def test_keywords_as_sdpa(backend):
    q, k, v = _qkv()
    attn = ts.compile(ts.Dense(), causal=True, backend=backend)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3, enable_gqa=True)
    got = attn(q, k, v, is_causal=True, scale=0.3, enable_gqa=True, dropout_p=0.0)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    default = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    torch.testing.assert_close(attn(q, k, v), default, atol=1e-5, rtol=1e-5)  # the override held for one call only


def test_scale_override_matches_reference_on_a_sparse_pattern():
    q, k, v = _qkv()
    attn = ts.compile(ts.Hash(buckets=3), backend="triton", scale=0.5)
    dec = attn.decide(q, k)
    ref = ts.compile(ts.Hash(buckets=3), backend="reference", scale=0.2).reference(q, k, v, decisions=dec)
    torch.testing.assert_close(attn(q, k, v, decisions=dec, scale=0.2), ref, atol=1e-5, rtol=1e-5)


def test_refusals_name_the_argument():
    q, k, v = _qkv()
    attn = ts.compile(ts.Dense(), causal=True, backend="reference")
    with pytest.raises(ValueError, match=r"is_causal=False but this op was compiled with causal=True"):
        attn(q, k, v, is_causal=False)
    with pytest.raises(ValueError, match="dropout_p=0.1: attention dropout is not supported"):
        attn(q, k, v, dropout_p=0.1)
    with pytest.raises(ValueError, match="enable_gqa=False but k has 2 heads and q 4"):
        attn(q, k, v, enable_gqa=False)
    with pytest.raises(ValueError, match=r"attn_mask of shape \(2, 1, 40, 40\) is not a key-padding mask"):
        attn(q, k, v, attn_mask=torch.ones(2, 1, 40, 40, dtype=torch.bool))
    with pytest.raises(TypeError, match="only a boolean key-padding mask"):
        attn(q, k, v, attn_mask=torch.zeros(2, 1, 1, 40))
    with pytest.raises(ValueError, match="scale must be a positive number"):
        attn(q, k, v, scale=-1.0)
    with pytest.raises(ValueError, match="either attn_mask= or key_padding_mask="):
        m = torch.ones(2, 40, dtype=torch.bool)
        attn(q, k, v, attn_mask=m, key_padding_mask=m)


@pytest.mark.parametrize("spec", [ts.Dense(), ts.Hash(buckets=3, attend_self=False), ts.TopKFeatures(k=4)])
def test_return_lse_is_the_masked_logsumexp(spec):
    q, k, v = _qkv(Hkv=4)
    attn = ts.compile(spec, causal=True, backend="executor", scale=0.25)
    dec = attn.decide(q, k) if spec.decision_fields else None
    out, lse = attn(q, k, v, decisions=dec, return_lse=True)
    assert lse.shape == (2, 4, 40) and lse.dtype == torch.float32
    # the same op without the mask: exp(s - lse) summed over kept keys is 1 on non-empty rows
    ref = attn.reference(q, k, v, decisions=dec)
    torch.testing.assert_close(out, ref.to(out.dtype), atol=1e-5, rtol=1e-5)
    from tilesparse.api import dense_mask
    from tilesparse.ir import check_inputs

    mask = dense_mask(attn.spec, dec or ts.Decisions(), causal=True, inputs=check_inputs(q, k, v))
    qf, kf = q, k
    if spec.supports(dec or ts.Decisions()) is not None:
        from tilesparse.backends.reference import feature_mask

        qf, kf = q * feature_mask(dec.q_support, 16, q.dtype), k * feature_mask(dec.k_support, 16, k.dtype)
    s = (qf @ kf.transpose(-1, -2) * 0.25).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(lse, torch.logsumexp(s, -1), atol=1e-5, rtol=1e-5)
    if isinstance(spec, ts.Hash):
        assert torch.isneginf(lse[:, :, 0]).all()  # attend_self=False and causal: row 0 is empty


def test_seeded_op_is_deterministic_and_resamples_when_asked():
    q, k, v = _qkv()
    fixed = ts.compile(ts.Hash(buckets=4), backend="executor", seed=7, resample=False)
    a, b = fixed(q, k, v), fixed(q, k, v)
    assert torch.equal(a, b)
    same = ts.compile(ts.Hash(buckets=4), backend="executor", seed=7, resample=False)
    assert torch.equal(same(q, k, v), a)
    resampling = ts.compile(ts.Hash(buckets=4), backend="executor", seed=7)
    first, second = resampling(q, k, v), resampling(q, k, v)
    assert torch.equal(first, a) and not torch.equal(first, second)  # the same sequence, fresh draws per call
    again = ts.compile(ts.Hash(buckets=4), backend="executor", seed=7)
    assert torch.equal(again(q, k, v), first) and torch.equal(again(q, k, v), second)
    # padding calls decide with the op's generator too
    kpm = torch.ones(2, 40, dtype=torch.bool)
    assert torch.equal(fixed(q, k, v, key_padding_mask=kpm), a)
    with pytest.raises(ValueError, match="seed must be a non-negative int"):
        ts.compile(ts.Hash(), seed=-1)


def test_sparse_attention_module_keeps_its_seed_in_the_state_dict():
    q, k, v = _qkv()
    m = ts.SparseAttention(ts.QKDrop(keep=0.5), seed=3, resample=False, backend="executor")
    out = m(q, k, v)
    assert torch.equal(m(q, k, v), out)
    other = ts.SparseAttention(ts.QKDrop(keep=0.5), seed=11, resample=False, backend="executor")
    assert not torch.equal(other(q, k, v), out)
    other.load_state_dict(m.state_dict())
    assert torch.equal(other(q, k, v), out)
    assert "seed" in m.state_dict()
