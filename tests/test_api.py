"""The public API: compile, call, decide, reference, prepare, plan and explain behave as stated
for every spec, on both CPU backends ("reference", the CPU's auto choice, and "executor").

Property tests first (random specs, decisions and inputs through ``assert_equivalent``), then
the edge cases the semantics single out (a query with no key, all tokens in one bucket, every
query of a head dropped, T = 1, grouped-query attention: zeros where stated, never NaN, zero
gradients there), then every error path (inputs, spec/input mismatches, forced backends).
CPU only.
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse import ir
from tilesparse.testing import assert_equivalent, attention_inputs, decisions, specs

BACKENDS = ["reference", "executor"]


def tensors(B=1, H=2, Hkv=None, T=12, D=8, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    Hkv = Hkv or H
    shapes = ((B, H, T, D), (B, Hkv, T, D), (B, Hkv, T, D))
    return tuple(torch.randn(s, generator=g).to(dtype).requires_grad_() for s in shapes)


def run(attn, q, k, v, dec):
    """(out, (dq, dk, dv)) of attn under an all-ones upstream gradient."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = attn(q, k, v, decisions=dec)
    out.sum().backward()
    return out, (q.grad, k.grad, v.grad)


@settings(max_examples=50)
@given(data=st.data(), causal=st.booleans(), backend=st.sampled_from(["auto", *BACKENDS]))
def test_every_spec_matches_its_reference(data, causal, backend):
    q, k, v = data.draw(attention_inputs(seqlen=st.integers(1, 128)))
    spec = data.draw(specs(heads=q.shape[1], max_k=q.shape[-1]))
    dec = data.draw(decisions(spec, q.shape))
    assert_equivalent(ts.compile(spec, causal=causal, backend=backend), q, k, v, decisions=dec)


@settings(max_examples=25)
@given(data=st.data())
def test_calls_without_decisions_use_the_criteria_reproducibly(data):
    q, k, v = data.draw(attention_inputs(seqlen=st.integers(1, 64), dtype=torch.float32, requires_grad=False))
    spec = data.draw(specs(heads=q.shape[1], max_k=q.shape[-1]))
    attn = ts.compile(spec, backend="executor")
    seed = data.draw(st.integers(0, 2**16))
    out = attn(q, k, v, generator=torch.Generator().manual_seed(seed))
    dec = attn.decide(q, k, generator=torch.Generator().manual_seed(seed))
    assert torch.equal(out, attn(q, k, v, decisions=dec))
    torch.testing.assert_close(out, attn.reference(q, k, v, decisions=dec), atol=1e-5, rtol=0)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("backend", BACKENDS)
def test_dense_is_sdpa_with_grouped_query_attention(backend, causal):
    q, k, v = tensors(B=2, H=4, Hkv=2, T=77, D=16)
    attn = ts.compile(ts.Dense(), causal=causal, backend=backend)
    out = attn(q, k, v)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    scaled = ts.compile(ts.Dense(), causal=causal, scale=0.05, backend=backend)
    torch.testing.assert_close(
        scaled(q, k, v),
        F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.05, enable_gqa=True),
        atol=1e-5,
        rtol=1e-5,
    )


# ---------------------------------------------------------------------------------------------
# edge cases


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_query_with_no_key_outputs_zeros_and_gets_zero_gradient(backend):
    # causal, key 0 dropped: query 0 keeps no key; Hash(attend_self=False): query 0 sees nothing
    q, k, v = tensors(T=10)
    keep = torch.ones(1, 2, 10, dtype=torch.bool)
    keep[0, 0, 0] = False
    zero = torch.zeros(1, 2, 10, dtype=torch.int32)
    cases = [
        (ts.QKDrop(), ts.Decisions(q_keep=torch.ones_like(keep), k_keep=keep), [(0, 0)]),
        (ts.Hash(buckets=2, attend_self=False), ts.Decisions(q_bucket=zero, k_bucket=zero), [(0, 0), (1, 0)]),
    ]
    for spec, dec, empty in cases:
        attn = ts.compile(spec, causal=True, backend=backend)
        out, (dq, dk, dv) = run(attn, q, k, v, dec)
        assert all(torch.isfinite(t).all() for t in (out, dq, dk, dv)), spec
        for h, i in empty:
            assert not out[0, h, i].any() and not dq[0, h, i].any(), (spec, h, i)
        assert out[0, 1, 1:].abs().sum() > 0
        assert_equivalent(attn, q, k, v, decisions=dec)


@pytest.mark.parametrize("backend", BACKENDS)
def test_all_tokens_in_one_bucket_is_dense_attention(backend):
    q, k, v = tensors(H=2, Hkv=1, T=70, D=16)
    one = torch.full((1, 2, 70), 3, dtype=torch.int64)
    dense_out, dense_grads = run(ts.compile(ts.Dense(), backend=backend), q, k, v, None)
    hash_out, hash_grads = run(
        ts.compile(ts.Hash(buckets=4), backend=backend), q, k, v, ts.Decisions(q_bucket=one, k_bucket=one)
    )
    torch.testing.assert_close(hash_out, dense_out, atol=1e-6, rtol=1e-5)
    for a, b in zip(hash_grads, dense_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_query_of_a_head_dropped_gives_that_head_zeros(backend):
    q, k, v = tensors(H=4, Hkv=2, T=40)
    q_keep = torch.rand(1, 4, 40, generator=torch.Generator().manual_seed(1)) < 0.7
    q_keep[0, 1] = False  # head 1 drops every query
    dec = ts.Decisions(q_keep=q_keep, k_keep=torch.ones(1, 4, 40, dtype=torch.bool))
    attn = ts.compile(ts.QKDrop(), backend=backend)
    out, (dq, dk, _) = run(attn, q, k, v, dec)
    assert not out[0, 1].any() and not dq[0, 1].any()
    assert not out[0][~q_keep[0]].any(), "every dropped query outputs zeros"
    assert out[0, 0].abs().sum() > 0 and dk[0, 0].abs().sum() > 0
    assert_equivalent(attn, q, k, v, decisions=dec)
    # with every query of every head dropped, nothing reaches k and v either
    none = ts.Decisions(q_keep=torch.zeros_like(q_keep), k_keep=dec.k_keep)
    out, grads = run(attn, q, k, v, none)
    assert not out.any() and not any(g.any() for g in grads)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "spec",
    [ts.Dense(), ts.QKDrop(keep=0.5), ts.Hash(buckets=3), ts.Hash(attend_self=False), ts.TopKFeatures(k=3),
     ts.PerHead(dense_heads=[0], rest=ts.Hybrid(parts=[ts.Hash(buckets=2), ts.QKDrop()]))],
    ids=str,
)  # fmt: skip
def test_a_sequence_of_one_token(spec, backend):
    q, k, v = tensors(B=2, H=2, Hkv=1, T=1)
    attn = ts.compile(spec, causal=True, backend=backend)
    dec = attn.decide(q, k, generator=torch.Generator().manual_seed(0))
    out, grads = run(attn, q, k, v, dec)
    assert out.shape == (2, 2, 1, 8) and all(torch.isfinite(t).all() for t in (out, *grads))
    if isinstance(spec, ts.Hash) and not spec.attend_self:
        assert not out.any(), "the only key is the query itself, which attend_self=False excludes"
    assert_equivalent(attn, q, k, v, decisions=dec)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_low_precision_inputs_give_low_precision_outputs_and_gradients(dtype):
    q, k, v = tensors(H=4, Hkv=1, T=50, D=32, dtype=dtype)
    attn = ts.compile(ts.Hybrid(parts=[ts.Hash(buckets=2), ts.TopKFeatures(k=8)]), backend="executor")
    dec = attn.decide(q, k, generator=torch.Generator().manual_seed(0))
    out, grads = run(attn, q, k, v, dec)
    assert out.dtype == dtype and all(g.dtype == dtype for g in grads)
    assert_equivalent(attn, q, k, v, decisions=dec)


# ---------------------------------------------------------------------------------------------
# the rest of the surface


def test_prepare_plan_and_explain():
    q, k, v = tensors(H=3, T=100)
    spec = ts.PerHead(dense_heads=[2], rest=ts.Hash(buckets=4))
    attn = ts.compile(spec, backend="executor")
    assert (
        repr(attn)
        == "CompiledAttention(PerHead(dense_heads=[2], rest=Hash(buckets=4)), causal=True, backend='executor')"
    )
    prepared = attn.prepare(q, k, v, generator=torch.Generator().manual_seed(0))
    assert isinstance(prepared, ir.Prepared) and [g.heads for g in prepared.groups] == [(2,), (0, 1)]
    assert ir.verify(prepared.program, prepared, deep=True) == []
    plan = attn.plan(q, k, v)
    assert plan is attn.plan(q, k, v), "plans are cached per dtype, device, sizes and grad"
    assert [a.backend.NAME for a in plan.assignments] == ["executor", "executor"]
    text = attn.explain(q, k, v)
    for needle in ("group 0: heads[2] layout=identity", "-> executor (heads [2])", "group 1: heads[rest] layout=sort",
                   "decide[torch] -> layout[torch]", "tiles (64x64): visited"):  # fmt: skip
        assert needle in text, text
    assert ts.compile(spec.model_dump_json()).spec == spec
    assert ts.compile(spec.model_dump()).spec == spec


def test_forcing_sdpa_on_a_hash_spec_lists_the_reasons():
    q, k, v = tensors()
    with pytest.raises(ts.NoBackendError) as info:
        ts.compile(ts.Hash(buckets=4), backend="sdpa")(q, k, v)
    text = str(info.value)
    assert "backend 'sdpa' cannot run head group heads[rest] layout=sort" in text
    assert "layout sort is not identity" in text and "beyond non-strict causality" in text
    with pytest.raises(ts.NoBackendError, match=r"layout compact is not identity"):
        ts.compile(ts.Hybrid(parts=[ts.QKDrop(keep=0.5), ts.TopKFeatures(k=2)]), backend="sdpa")(q, k, v)
    with pytest.raises(ValueError, match=r"backend must be 'auto' or a registered backend \["):
        ts.compile(ts.Dense(), backend="no-such")
    # a forced backend that can run the group runs it
    torch.testing.assert_close(
        ts.compile(ts.Dense(), backend="sdpa")(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True)
    )


def test_spec_and_input_mismatches_are_named():
    q, k, v = tensors(H=2, D=8)
    per_head = ts.PerHead(dense_heads=[0, 2], rest=ts.Hash())
    attn = ts.compile(per_head)
    for call in (lambda: attn.decide(q, k), lambda: attn(q, k, v), lambda: attn.prepare(q, k, v),
                 lambda: attn.reference(q, k, v)):  # fmt: skip
        with pytest.raises(ValueError, match=r"PerHead.dense_heads \[2\] out of range for 2 query heads"):
            call()
    for spec in (
        ts.TopKFeatures(k=9),
        ts.Hybrid(parts=[ts.Hash(), ts.TopKFeatures(k=16)]),
        ts.PerHead(dense_heads=[0], rest=ts.TopKFeatures(k=16)),
        ts.PerHead(dense_heads=[0], rest=ts.Hybrid(parts=[ts.Hash(), ts.TopKFeatures(k=16)])),
    ):
        attn = ts.compile(spec)
        with pytest.raises(ValueError, match=r"TopKFeatures.k=\d+ exceeds the head dim D=8"):
            attn.decide(q, k)
        with pytest.raises(ValueError, match="exceeds the head dim"):
            attn(q, k, v)


def test_decisions_made_for_another_spec_are_still_checked():
    q, k, v = tensors(T=64, D=16)
    wide, narrow = ts.compile(ts.Hash(buckets=16)), ts.compile(ts.Hash(buckets=4))
    dec = wide.decide(q, k, generator=torch.Generator().manual_seed(0))
    assert int(dec.q_bucket.max()) >= 4
    wide(q, k, v, decisions=dec)  # its own decisions: accepted without reading them back
    with pytest.raises(ValueError, match=r"values must lie in \[0, 4\)"):
        narrow(q, k, v, decisions=dec)
    top = ts.compile(ts.TopKFeatures(k=4)).decide(q, k)
    with pytest.raises(ValueError, match=r"must have shape \(1, 2, 64, 2\)"):
        ts.compile(ts.TopKFeatures(k=2))(q, k, v, decisions=top)


def _wrong_inputs():
    """(q, k, v), the error, its message, and the message of ``decide(q, k)`` (None: decide
    never sees v)."""
    q, k, v = (torch.randn(1, 4, 16, 16) for _ in range(3))
    return [
        ((q[0], k, v), ValueError, r"q must be 4-D \(B, heads, T, D\), got shape \(4, 16, 16\)", "same"),
        ((q, k.unsqueeze(0), v), ValueError, r"k must be 4-D", "same"),
        ((q, k, "v"), TypeError, r"v must be a torch.Tensor, got str", None),
        ((q.int(), k, v), TypeError, r"q has dtype torch.int32; supported: float16, bfloat16, float32", "same"),
        ((q.double(), k.double(), v.double()), TypeError, r"q has dtype torch.float64", "same"),
        (
            (q, k.half(), v),
            TypeError,
            r"q, k, v must share one dtype, got torch.float32, torch.float16, torch.float32",
            r"must share one dtype",
        ),
        (
            (q, k.to("meta"), v),
            ValueError,
            r"q, k, v must be on one device, got cpu, meta, cpu",
            r"must be on one device",
        ),
        (
            (q, k, v[:, :2]),
            ValueError,
            r"k and v must have the same shape, got \(1, 4, 16, 16\) and \(1, 2, 16, 16\)",
            None,
        ),
        ((q, k[:, :, :8], v[:, :, :8]), ValueError, r"q has Tq=16 rows but k has Tk=8: Tq must be <= Tk", "same"),
        ((q, k[:, :, :, :8], v[:, :, :, :8]), ValueError, r"k must be \(B=1, Hkv, Tk, D=16\) to match q", "same"),
        (
            (q, k[:, :3], v[:, :3]),
            ValueError,
            r"q's 4 heads must be a multiple of k's 3 heads \(grouped-query attention\)",
            "same",
        ),
        (
            (q[..., :12], k[..., :12], v[..., :12]),
            ValueError,
            r"head dim D must be a multiple of 8 in \[8, 256\], got 12",
            "same",
        ),
        (tuple(torch.randn(1, 1, 4, 264) for _ in range(3)), ValueError, r"got 264", "same"),
        ((q[:, :, :0], k[:, :, :0], v[:, :, :0]), ValueError, r"q must have B, H, T >= 1", "same"),
    ]


@pytest.mark.parametrize("index", range(len(_wrong_inputs())))
def test_wrong_inputs_are_named(index):
    args, error, says, decide_says = _wrong_inputs()[index]
    attn = ts.compile(ts.Hash(buckets=2))
    for method in (attn.__call__, attn.reference, attn.prepare, attn.explain, attn.plan):
        with pytest.raises(error, match=says):
            method(*args)
    if decide_says is not None:
        with pytest.raises(error, match=says if decide_says == "same" else decide_says):
            attn.decide(args[0], args[1])


def test_compile_options_are_checked():
    with pytest.raises(TypeError, match="causal must be a bool, got 1"):
        ts.compile(ts.Dense(), causal=1)
    with pytest.raises(TypeError, match="backend must be a string, got None"):
        ts.compile(ts.Dense(), backend=None)
    q, k, v = tensors()
    with pytest.raises(ValueError, match="scale must be None or a finite number > 0, got -1.0"):
        ts.compile(ts.Dense(), scale=-1.0)
    with pytest.raises(Exception, match="kind"):
        ts.compile({"kind": "sliding"})
