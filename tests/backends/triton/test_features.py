"""TopKFeatures' q~ and k~ in one launch a side (features.py), under the interpreter: the
output is exactly x (repeated per query head) with the unkept features zeroed by ``where``
for the group's heads and untouched for the others, and the gradient is the same selection of
the incoming gradient summed over each kv head's query heads; an inf or NaN in an unkept
feature stays out of a TopKFeatures call end to end."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.backends.reference import feature_mask
from tilesparse.backends.triton.features import keep_features


def _keep(support: torch.Tensor, heads: tuple[int, ...], n_heads: int, D: int) -> torch.Tensor:
    """The definition in torch: (B, n_heads, T, D) True where an element stays (every feature of
    a head outside ``heads``, the support's features of one inside)."""
    B, _, T, _ = support.shape
    keep = torch.ones((B, n_heads, T, D), dtype=torch.bool)
    keep[:, list(heads)] = feature_mask(support, D, torch.float32).bool()
    return keep


def _selected(x: torch.Tensor, support: torch.Tensor, heads: tuple[int, ...], n_heads: int) -> torch.Tensor:
    """x per query head, the group's heads through their feature mask."""
    xr = x.repeat_interleave(n_heads // x.shape[1], dim=1)
    return torch.where(_keep(support, heads, n_heads, x.shape[-1]), xr, 0.0)


@settings(max_examples=20)
@given(data=st.data())
def test_keep_features_is_the_masked_input_and_its_gradient(data):
    B = data.draw(st.integers(1, 2))
    Hx = data.draw(st.integers(1, 3))
    group = data.draw(st.integers(1, 3))
    H = Hx * group
    heads = tuple(data.draw(st.permutations(range(H)))[: data.draw(st.integers(1, H))])
    T = data.draw(st.integers(1, 80))  # past one program's rows (64 at D=64, 32 at D=128)
    D = data.draw(st.sampled_from([8, 16, 24, 64, 96, 128, 256]))  # 1, 2 and 4 words of feature bits
    n_keep = data.draw(st.one_of(st.just(D), st.integers(1, min(D, 10))))  # every feature, or a few
    dtype = data.draw(st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    x = torch.randn((B, Hx, T, D), generator=g).to(dtype)
    if data.draw(st.booleans()):  # rows and heads strided, D unit-stride (a slice of a wider tensor)
        x = torch.randn((B, Hx + 1, T, D), generator=g).to(dtype)[:, 1:]
    x.requires_grad_(True)
    support = torch.rand((B, len(heads), T, D), generator=g).argsort(-1)[..., :n_keep].to(torch.int32)
    out = keep_features(x, support, heads, H)
    want = _selected(x.detach(), support, heads, H)
    assert out.dtype == dtype and out.shape == (B, H, T, D)
    assert torch.equal(out, want)
    grad = torch.randn((B, H, T, D), generator=g).to(dtype)
    (got,) = torch.autograd.grad(out, x, grad)
    # fp32 sums in head order, one cast (the interpreter's bf16 cast truncates: within an ulp)
    summed = torch.where(_keep(support, heads, H, D), grad.float(), 0.0).view(B, Hx, group, T, D).sum(2)
    if dtype == torch.float32:
        torch.testing.assert_close(got, summed, rtol=1e-6, atol=1e-6)
    else:
        ulp = torch.finfo(dtype).eps * summed.abs() + torch.finfo(dtype).tiny
        assert ((got.float() - summed).abs() <= 2 * ulp).all()


def test_keep_features_names_bad_arguments():
    """Bad shapes, strides, dtypes and head lists are refused by name, before any launch (a
    support with fewer rows of heads than the head list names would be read past its end)."""
    x = torch.randn(1, 2, 8, 16)
    support = torch.zeros((1, 2, 8, 4), dtype=torch.int32)
    with pytest.raises(ValueError, match="unit stride along D"):
        keep_features(x.transpose(2, 3), support, (0, 1), 2)
    with pytest.raises(ValueError, match="query heads"):
        keep_features(x, support, (0, 1), 3)
    for heads in ((0, 0), (0, 2), (-1, 1)):
        with pytest.raises(ValueError, match="heads must be distinct"):
            keep_features(x, support, heads, 2)
    with pytest.raises(ValueError, match="support must be"):
        keep_features(x, support, (1,), 2)
    with pytest.raises(ValueError, match="support must be"):
        keep_features(x, support.long(), (0, 1), 2)
    with pytest.raises(ValueError, match="support must be"):
        keep_features(x, support[:, :, :5], (0, 1), 2)


@pytest.mark.parametrize("value", [float("inf"), float("nan")], ids=["inf", "nan"])
def test_an_unkept_feature_stays_out_of_a_call(value):
    """An inf or NaN where q's and k's supports do not reach changes nothing: the output and
    gradients equal the call on clean inputs (a product with the 0/1 mask made it NaN)."""
    spec = ts.TopKFeatures(k=3)
    attn = ts.compile(spec, causal=True, backend="triton")
    g = torch.Generator().manual_seed(0)
    q = torch.randn((1, 4, 40, 16), generator=g)
    k, v = (torch.randn((1, 2, 40, 16), generator=g) for _ in range(2))
    dec = attn.decide(q, k)
    bad_q, bad_k = q.clone(), k.clone()
    for t, support, per_kv in ((bad_q, dec.q_support, 1), (bad_k, dec.k_support, 2)):
        for h in range(t.shape[1]):  # a feature none of the head's (kv head's query heads') rows 7 keep
            kept = torch.zeros(16, dtype=torch.bool)
            kept[support[0, h * per_kv : (h + 1) * per_kv, 7].long().flatten()] = True
            t[0, h, 7, int((~kept).nonzero()[0])] = value
    w = torch.randn((1, 4, 40, 16), generator=g)

    def run(q_, k_):
        leaves = [t.clone().requires_grad_() for t in (q_, k_, v)]
        out = attn(*leaves, decisions=dec)
        return [out, *torch.autograd.grad(out, leaves, w)]

    for got, want in zip(run(bad_q, bad_k), run(q, k), strict=True):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
