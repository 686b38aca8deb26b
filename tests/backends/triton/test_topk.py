"""The one-launch ``topk_abs`` kernel (backends/triton/topk.py) against the criterion's torch
ops (patterns/criteria.py), exactly, under the interpreter: ties, NaN, infinities, signed
zeros and subnormals, every dtype, head dims that are not powers of two, GQA, Tq != Tk and
strided inputs; and an op's decisions made through it on the device path."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.backends.triton import topk
from tilesparse.decide import topk_part
from tilesparse.patterns import criteria
from tilesparse.patterns.criteria import topk_abs

_SPECIALS = (float("nan"), float("inf"), float("-inf"), -0.0, 0.0, 1e-40, -1e-40)


def _tensor(shape, dtype, values, seed, layout):
    """Values of a few magnitudes (ties everywhere) or spread ones, with special values strewn
    in; ``layout`` "bthd": a (B, T, H, D) tensor seen as (B, H, T, D), as a model's
    projections give it."""
    g = torch.Generator().manual_seed(seed)
    if values == "ties":
        x = torch.randint(-2, 3, shape, generator=g).float()
    else:
        x = torch.randn(shape, generator=g)
    flat = x.view(-1)
    n = max(1, flat.numel() // 7)
    picks = torch.randint(0, flat.numel(), (n,), generator=g)
    flat[picks] = torch.tensor(_SPECIALS)[torch.randint(0, len(_SPECIALS), (n,), generator=g)]
    x = x.to(dtype)
    if layout == "bthd":
        return x.transpose(1, 2).contiguous().transpose(1, 2)
    return x


@settings(max_examples=40, deadline=None)
@given(
    B=st.integers(1, 2),
    kv_heads=st.integers(1, 2),
    group=st.sampled_from([1, 2, 4]),
    q_len=st.integers(1, 40),
    extra=st.integers(0, 20),
    D=st.sampled_from([1, 3, 16, 24, 48, 64, 80, 128, 200]),
    keep=st.floats(0, 1),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    values=st.sampled_from(["ties", "spread"]),
    layout=st.sampled_from(["bhtd", "bthd"]),
    seed=st.integers(0, 2**16),
)
def test_the_kernel_selects_as_the_criterion(B, kv_heads, group, q_len, extra, D, keep, dtype, values, layout, seed):
    H, k_len = kv_heads * group, q_len + extra
    n_keep = max(1, round(keep * D))
    q = _tensor((B, H, q_len, D), dtype, values, seed, layout)
    k = _tensor((B, kv_heads, k_len, D), dtype, values, seed + 1, layout)
    q_support = torch.empty((B, H, q_len, n_keep), dtype=torch.int32)
    k_support = torch.empty((B, H, k_len, n_keep), dtype=torch.int32)
    topk.topk_abs_into(q, k, n_keep, q_support, k_support)
    want_q, want_k = topk_abs(q, k.repeat_interleave(group, dim=1), k=n_keep)
    assert torch.equal(q_support, want_q)
    assert torch.equal(k_support, want_k)


@pytest.mark.parametrize("n_keep,want", [(2, [1, 5]), (3, [1, 5, 6]), (4, [1, 2, 5, 6])])
def test_nans_tie_with_each_other_and_beat_infinity(n_keep, want):
    """Every NaN ranks above infinity and ties with the other NaNs, whatever its payload or
    sign: the lowest ids win, as the criterion's stable sort decides."""
    payload = torch.tensor([0x7FC00001], dtype=torch.int32).view(torch.float32).item()
    x = torch.tensor([1.0, float("nan"), float("inf"), 2.0, -0.0, -float("nan"), payload, float("-inf")])
    assert x[6].view(torch.int32) != x[1].view(torch.int32)  # another NaN than x[1]'s
    q = x.view(1, 1, 1, 8)
    out = torch.empty((1, 1, 1, n_keep), dtype=torch.int32), torch.empty((1, 1, 1, n_keep), dtype=torch.int32)
    topk.topk_abs_into(q, q, n_keep, *out)
    assert out[0].view(-1).tolist() == want
    assert torch.equal(out[0], topk_abs(q, q, k=n_keep)[0])


def test_the_kernel_refuses_what_it_cannot_select():
    q = torch.randn(1, 4, 8, 16)
    k = torch.randn(1, 2, 9, 16)
    qs, ks = torch.empty((1, 4, 8, 3), dtype=torch.int32), torch.empty((1, 4, 9, 3), dtype=torch.int32)
    with pytest.raises(ValueError, match="n_keep must lie in"):
        topk.topk_abs_into(q, k, 17, qs, ks)
    with pytest.raises(ValueError, match="k of shape"):
        topk.topk_abs_into(q, torch.randn(1, 3, 9, 16), 3, qs, ks)
    with pytest.raises(ValueError, match="q and k must share one of"):
        topk.topk_abs_into(q, k.double(), 3, qs, ks)
    with pytest.raises(ValueError, match=r"k_support must be a contiguous \(1, 4, 9, 3\) int32 tensor"):
        topk.topk_abs_into(q, k, 3, qs, ks.long())
    assert topk.topk_abs_reasons("cpu", 64) and topk.topk_abs_reasons("cuda", 512)
    assert topk.topk_abs_reasons("cuda", 256) == []


def test_an_op_decides_through_the_kernel_where_it_runs(monkeypatch):
    """With the kernel let run on the CPU: an op's TopKFeatures decisions (GQA, in a hybrid
    with QKDrop) come from one launch a call, equal the spec's torch-op decisions, and its call
    equals the reference on them."""
    monkeypatch.setattr(topk, "topk_abs_reasons", lambda device_type, head_dim: [])
    launches = []
    real = topk._topk_abs.run
    monkeypatch.setattr(topk._topk_abs, "run", lambda *a, **kw: launches.append(1) or real(*a, **kw))
    spec = ts.Hybrid(parts=(ts.QKDrop(keep=0.7), ts.TopKFeatures(k=5)))
    attn = ts.compile(spec, causal=True, backend="triton", seed=3)
    g = torch.Generator().manual_seed(0)
    q = torch.randn((1, 4, 33, 16), generator=g)
    k, v = (torch.randn((1, 2, 33, 16), generator=g) for _ in range(2))
    dec = attn.decide(q, k)
    assert len(launches) == 1
    want = topk_abs(q, k.repeat_interleave(2, dim=1), k=5)
    assert torch.equal(dec.q_support, want[0]) and torch.equal(dec.k_support, want[1])
    out = attn(q, k, v, decisions=dec)
    torch.testing.assert_close(out, attn.reference(q, k, v, decisions=dec))


def test_a_criterion_registered_over_topk_abs_is_not_bypassed(monkeypatch):
    """Only the built-in criterion goes to the kernel: one registered over its name runs."""
    spec = ts.TopKFeatures(k=2)
    assert topk_part(spec) is spec
    other = criteria.Criterion("topk_abs", "support", lambda q, k, *, k_=1, generator=None: None)
    monkeypatch.setitem(criteria._REGISTRY, "topk_abs", other)
    assert topk_part(spec) is None


def test_a_traced_call_decides_in_the_kernels_layout(monkeypatch):
    """Under a ``torch.compile`` trace (fake tensors) the supports get the shapes and strides
    the kernel's fill has in the real call, and nothing is launched: the compiled graph checks
    the real outputs against them. q and k as a model's projections give them (tokens before
    heads in memory), where the torch ops' supports keep that order."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    monkeypatch.setattr(topk, "topk_abs_reasons", lambda device_type, head_dim: [])
    launches = []
    real_run = topk._topk_abs.run
    monkeypatch.setattr(topk._topk_abs, "run", lambda *a, **kw: launches.append(1) or real_run(*a, **kw))
    attn = ts.compile(ts.TopKFeatures(k=3), backend="triton")
    g = torch.Generator().manual_seed(1)
    q = torch.randn((1, 20, 4, 16), generator=g).transpose(1, 2)
    k = torch.randn((1, 20, 2, 16), generator=g).transpose(1, 2)
    real = attn.decide(q, k)
    assert len(launches) == 1
    with FakeTensorMode() as mode:
        fake = attn.decide(mode.from_tensor(q), mode.from_tensor(k))
    assert len(launches) == 1
    for name in ("q_support", "k_support"):
        got, want = getattr(fake, name), getattr(real, name)
        assert (got.shape, got.stride(), got.dtype) == (want.shape, want.stride(), want.dtype), name
