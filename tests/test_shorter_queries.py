"""Queries shorter than keys (Tq <= Tk, query i at absolute position Tk - Tq + i), on the CPU.

Property tests: every pattern (drawn by ``tilesparse.testing.specs``, GQA included), both
passes, on the tile executor and on the Triton kernels under the interpreter, against the
masked dense reference with bottom-right causality; the IR's invariants (``verify``, deep:
every tile holding a kept element is visited, every unmasked tile is full) on random Tq < Tk;
examples: the reference is the last Tq rows of the whole-sequence reference, SDPA stays exact
(an explicit bottom-right mask instead of ``is_causal``'s top-left), CuPy refuses with a reason.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.backends import BUILDERS, REGISTRY
from tilesparse.ir import check_inputs, lower, prepare, verify
from tilesparse.testing import assert_equivalent, attention_inputs, decisions, specs


def _draw_case(data, max_t: int, dims=(8, 16)):
    q, k, v = data.draw(
        attention_inputs(seqlen=st.integers(1, max_t), shorter_queries=True, head_dim=st.sampled_from(dims))
    )
    spec = data.draw(specs(heads=q.shape[1], max_k=8))
    dec = data.draw(decisions(spec, q.shape, k_len=k.shape[2]))
    return q, k, v, spec, dec


@settings(max_examples=40)
@given(data=st.data(), causal=st.booleans())
def test_executor_matches_reference(data, causal):
    q, k, v, spec, dec = _draw_case(data, 70)
    assert_equivalent(ts.compile(spec, causal=causal, backend="executor"), q, k, v, decisions=dec)


# derandomized: its time varied 17-76 s with the draw (CI's budget); the executor test above draws
# afresh. 10 examples: 15 took about 100 s of one of CI's two workers
@settings(max_examples=10, derandomize=True, database=None)
@given(data=st.data(), causal=st.booleans())
def test_triton_matches_reference(data, causal):
    q, k, v, spec, dec = _draw_case(data, 100, dims=(16, 32))
    assert_equivalent(ts.compile(spec, causal=causal, backend="triton"), q, k, v, decisions=dec)


@settings(max_examples=30)
@given(data=st.data(), causal=st.booleans(), blocks=st.sampled_from([(16, 16), (32, 16), (16, 64)]))
def test_prepared_index_is_well_formed(data, causal, blocks):
    q, k, v, spec, dec = _draw_case(data, 90)
    program = lower(spec, causal=causal).with_blocks(*blocks)
    p = prepare(program, dec, batch=q.shape[0], heads=q.shape[1], seqlen=k.shape[2], device="cpu", q_len=q.shape[2])
    assert verify(program, p, deep=True, block_n=(16, 32)) == []


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(
    "spec",
    [ts.Dense(), ts.QKDrop(keep=0.6), ts.Hash(buckets=3, attend_self=False), ts.TopKFeatures(k=4),
     ts.PerHead(dense_heads=[1], rest=ts.Hybrid(parts=[ts.Hash(buckets=2), ts.QKDrop(keep=0.7)]))],
    ids=str,
)  # fmt: skip
def test_reference_is_the_last_rows_of_the_whole_sequence(spec, causal):
    """The semantics: q's rows are the last Tq positions, whatever Tk - Tq is."""
    g = torch.Generator().manual_seed(1)
    B, H, Hkv, T, Tq, D = 2, 4, 2, 50, 13, 16
    q_all = torch.randn(B, H, T, D, generator=g)
    k, v = (torch.randn(B, Hkv, T, D, generator=g) for _ in range(2))
    attn = ts.compile(spec, causal=causal)
    whole = attn.decide(q_all, k, generator=g)
    q = q_all[:, :, T - Tq :]
    dec = ts.Decisions(**{n: None if t is None else (t[:, :, T - Tq :] if n.startswith("q_") else t)
                          for n, t in whole.items()})  # fmt: skip
    want = attn.reference(q_all, k, v, decisions=whole)[:, :, T - Tq :]
    torch.testing.assert_close(attn.reference(q, k, v, decisions=dec), want)
    torch.testing.assert_close(attn(q, k, v, decisions=dec).float(), want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("tq", [1, 5, 40])
def test_sdpa_aligns_causality_bottom_right(tq):
    """F.sdpa(is_causal=True) aligns top-left when Tq != Tk; the backend stays exact."""
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 4, tq, 16, generator=g, requires_grad=True)
    k, v = (torch.randn(1, 2, 40, 16, generator=g, requires_grad=True) for _ in range(2))
    attn = ts.compile(ts.Dense(), backend="sdpa")
    assert_equivalent(attn, q, k, v)


def test_cupy_refuses_shorter_queries_with_a_reason():
    q, k = torch.randn(1, 2, 8, 16), torch.randn(1, 2, 24, 16)
    group = lower(ts.TopKFeatures(k=4), causal=True).groups[0]
    inputs = check_inputs(q, k, k)
    cupy = BUILDERS["cupy"]
    for reasons in (
        REGISTRY["cupy"].not_supported_reasons(group, inputs),  # attend
        cupy.not_supported_reasons(group, inputs),  # the index build
        cupy.hash_reasons(inputs, 16),  # hashing the lsh buckets
    ):
        assert any("Tq=8 < Tk=24" in r for r in reasons), reasons


def test_queries_longer_than_keys_are_refused():
    q, k = torch.randn(1, 2, 9, 16), torch.randn(1, 2, 8, 16)
    with pytest.raises(ValueError, match="q has Tq=9 rows but k has Tk=8: Tq must be <= Tk"):
        ts.compile(ts.Dense())(q, k, k)


def test_decisions_of_the_wrong_side_length_are_named():
    q, k = torch.randn(1, 2, 4, 16), torch.randn(1, 2, 10, 16)
    attn = ts.compile(ts.Hash(buckets=2))
    dec = attn.decide(q, k)
    assert dec.q_bucket.shape == (1, 2, 4) and dec.k_bucket.shape == (1, 2, 10)
    bad = ts.Decisions(q_bucket=dec.q_bucket, k_bucket=dec.k_bucket[:, :, :4])
    with pytest.raises(ValueError, match=r"decisions.k_bucket must have shape \(1, 2, 10\) \(B, H, Tk\)"):
        attn(q, k, k, decisions=bad)


def test_explain_and_prepare_describe_shorter_queries():
    attn = ts.compile(ts.Hybrid(parts=[ts.Hash(buckets=4), ts.QKDrop(keep=0.6)]), backend="executor")
    q, k = torch.randn(1, 2, 20, 16), torch.randn(1, 2, 100, 16)
    attn(q, k, k)
    text = attn.explain(q, k, k)
    assert "inputs: q (1, 2, 20, 16) k/v (1, 2, 100, 16)" in text and "last call, heads [0, 1]: visited" in text
    p = attn.prepare(q, k, k, decisions=attn.decide(q, k))
    assert "Tq=20, Tk=100" in repr(p) and tuple(ts.ir.to_dense(p).shape) == (1, 2, 20, 100)
