"""Decisions made in a call by its bound decide step (``tilesparse.decide.bind_decisions``) are
those ``attn.decide`` makes with the same generator, for every built-in pattern and a user
criterion, with grouped-query attention and queries shorter than keys; and the call equals the
one made with the step unbound (``unbound_decide``, the path before the binding) bit for bit.

CPU, Triton in its interpreter; the hashing in the Triton builder (as on CUDA) where the call
allows it, so the fused build's deferred hashing is the one checked."""

from __future__ import annotations

import pytest
import torch

import tilesparse as ts
from tilesparse.backends.triton import hashing
from tilesparse.decide import unbound_decide

from builtin_specs import one_of_each_kind

SPECS = one_of_each_kind(keep=0.6, buckets=3, k=4)


@ts.criterion("test-bound-norm-bucket", produces="bucket", replace=True)
def _norm_bucket(q, k, /, *, buckets, generator=None):
    """Buckets from each token's norm: reads k per query head (a copy with GQA)."""
    def ids(x):
        return (x.float().norm(dim=-1) * 7).long() % buckets

    return ids(q), ids(k)


SPECS["user"] = ts.Hybrid(parts=[ts.Hash(buckets=3, criterion="test-bound-norm-bucket"), ts.QKDrop(keep=0.6)])


@pytest.fixture(autouse=True)
def _hash_in_the_builder(monkeypatch):
    monkeypatch.setattr(hashing, "lsh_hash_reasons", lambda *a: [])  # as on CUDA


@pytest.mark.parametrize("shape", [(2, 2, 24, 24), (4, 2, 20, 32)], ids=["gqa", "gqa-shorter-queries"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_a_call_decides_as_attn_decide_does(name, shape):
    H, Hkv, Tq, Tk = shape
    attn = ts.compile(SPECS[name], causal=True, backend="triton")
    g = torch.Generator().manual_seed(1)
    q = torch.randn((1, H, Tq, 16), generator=g)
    k, v = (torch.randn((1, Hkv, Tk, 16), generator=g) for _ in range(2))
    for seed in range(3):  # the first call binds anew, the second keeps its binding, the third reuses it
        out = attn(q, k, v, generator=torch.Generator().manual_seed(seed))
        dec = attn.decide(q, k, generator=torch.Generator().manual_seed(seed))
        assert torch.equal(out, attn(q, k, v, decisions=dec)), (name, seed)
        with unbound_decide():
            assert torch.equal(out, attn(q, k, v, generator=torch.Generator().manual_seed(seed))), (name, seed)
        torch.testing.assert_close(out, attn.reference(q, k, v, decisions=dec), atol=1e-4, rtol=1e-4)


def test_a_user_criterion_is_still_checked_in_a_bound_call():
    """The bound step checks a user criterion's output as ``spec.decide`` does: a wrong shape
    is an error naming the criterion, at every call."""
    @ts.criterion("test-bound-bad-shape", produces="keep", replace=True)
    def bad(q, k, /, *, keep, generator=None):
        return torch.ones(q.shape[:3], dtype=torch.bool), torch.ones(q.shape[:2], dtype=torch.bool)

    attn = ts.compile(ts.QKDrop(keep=0.5, criterion="test-bound-bad-shape"), causal=True, backend="triton")
    q, k, v = (torch.randn((1, 2, 24, 16)) for _ in range(3))
    for _ in range(3):
        with pytest.raises(ValueError, match="criterion 'test-bound-bad-shape'.*k_side must have shape"):
            attn(q, k, v)
