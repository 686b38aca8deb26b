"""On CUDA, given ids checked through an op's bound checks (``BoundChecks``: the id check's
launch arguments worked out once per layout, the check launched through the lean path) give
what the per-call path (``unbound_checks``) gives: the same output and gradients bit for bit
for good ids, and for a bad one a NaN output and the ValueError naming the field, from
``check_errors()``; bf16, grouped-query attention, several layouts in one op."""

from __future__ import annotations

import contextlib

import pytest
import torch

import tilesparse as ts
from tilesparse.patterns.decision_errors import unbound_checks

from builtin_specs import assert_poison_reaches, cuda_inputs

SPECS = {
    "hash": ts.Hash(buckets=16),
    "hybrid": ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)]),
    "topk": ts.TopKFeatures(k=8),
    "perhead": ts.PerHead(dense_heads=[0], rest=ts.Hash(buckets=16)),
}


def _given(dec):
    return ts.Decisions(**{n: t.clone() for n, t in dec.items() if t is not None})


@pytest.mark.parametrize("name", sorted(SPECS))
def test_bound_checks_match_the_per_call_path_and_catch_a_bad_id(name):
    attn = ts.compile(SPECS[name], causal=True, backend="triton")
    ts.check_errors()
    for T in (1000, 4096, 1000):  # a layout, another, the first again (kept)
        q, k, v = cuda_inputs((1, 8, 2, 64, T), grad=True)
        dec = _given(attn.decide(q, k))
        go = torch.randn_like(q)
        got = {}
        for label, switch in (("bound", contextlib.nullcontext), ("unbound", unbound_checks)):
            with switch():
                out = attn(q, k, v, decisions=dec)
                got[label] = (out, *torch.autograd.grad(out, (q, k, v), go))
        for a, b in zip(got["bound"], got["unbound"], strict=True):
            assert torch.equal(a, b), (name, T)
        ts.check_errors()  # nothing recorded
    field = "k_support" if name == "topk" else "k_bucket"
    bad = dict(dec.items())
    bad[field] = bad[field].clone()
    bad[field].view(-1)[7] = 300  # out of range: past the head dim, past the buckets
    with torch.no_grad():
        out = attn(q, k, v, decisions=ts.Decisions(**bad))
    assert out.isnan().all(), name
    with pytest.raises(ValueError, match=f"decisions.{field}"):
        ts.check_errors()


@pytest.mark.parametrize("shape", [(1, 8, 2, 64, 1000), (1, 8, 2, 64, 5000), (1, 8, 2, 128, 1000)],
                         ids=["D64_one_launch", "D64_pair", "D128_warp_specialized"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_folded_poison_gives_what_the_product_gave(name, shape):
    """A bad id's poison folded into the forward's stored output and lse (the Triton forward at
    D=64, in one launch and as a pair; after the warp-specialized forward at D=128, two
    products) against ``unfolded_poison()``, the call multiplying its output by it: the output
    NaN, the gradients NaN or 0, as far as the product's reach (``assert_poison_reaches``)."""
    from tilesparse.execute import unfolded_poison

    attn = ts.compile(SPECS[name], causal=True, backend="triton")
    ts.check_errors()
    q, k, v = cuda_inputs(shape, grad=True)
    bad = dict(_given(attn.decide(q, k)).items())
    field = "k_support" if name == "topk" else "k_bucket"
    bad[field].view(-1)[7] = 300
    go = torch.randn_like(q)
    got = {}
    for label, switch in (("folded", contextlib.nullcontext), ("product", unfolded_poison)):
        with switch():
            out = attn(q, k, v, decisions=_given(ts.Decisions(**bad)))
            got[label] = (out, *torch.autograd.grad(out, (q, k, v), go))
        assert (type(out.grad_fn).__name__ == "MulBackward0") == (label == "product")  # the arms differ
        with pytest.raises(ValueError, match=f"decisions.{field}"):
            ts.check_errors()
    assert_poison_reaches(got["folded"], got["product"])
