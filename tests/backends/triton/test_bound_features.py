"""TopKFeatures' q~ and k~ bound to the call signature (``features.BoundFeatures``, and the
group copied per index build with the call's supports) against the per-call path that
``unbound_features()`` restores: CPU, Triton under the interpreter, fp32, small sizes.

Each call has fresh tensors and decisions (a group or a binding that kept a previous call's
supports would show against the reference); outputs and gradients are bitwise those of the
per-call path and within tolerance of the reference, with and without GQA, for a group of every
head and one of some heads, with and without a gradient to take.
"""

from __future__ import annotations

import pytest
import torch

import tilesparse as ts
from tilesparse.backends.triton import features

SPECS = {
    "topk": ts.TopKFeatures(k=3),
    "perhead": ts.PerHead(dense_heads=[1], rest=ts.TopKFeatures(k=2)),
}


def _qkv(H: int, Hkv: int, seed: int, T: int = 40, D: int = 16):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, H, T, D, generator=g)
    k, v = (torch.randn(1, Hkv, T, D, generator=g) for _ in range(2))
    return q, k, v


def _run(attn, q, k, v, dec, w):
    """The output and the gradients w.r.t. q, k, v of ``(out * w).sum()``."""
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = attn(*leaves, decisions=dec)
    return [out, *torch.autograd.grad((out * w).sum(), leaves)]


@pytest.fixture
def paths(monkeypatch):
    """Counts of each path's entries: ``bound`` (one autograd node for both sides) and
    ``unbound`` (``keep_features`` a side)."""
    counts = {"bound": 0, "unbound": 0}
    apply, keep = features._KeptPair.apply, features.keep_features

    def counted_apply(*args):
        counts["bound"] += 1
        return apply(*args)

    def counted_keep(*args):
        counts["unbound"] += 1
        return keep(*args)

    monkeypatch.setattr(features._KeptPair, "apply", counted_apply)
    monkeypatch.setattr(features, "keep_features", counted_keep)
    return counts


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
@pytest.mark.parametrize("H,Hkv", [(2, 2), (4, 2)], ids=["mha", "gqa"])
def test_bound_features_equal_the_per_call_path_and_the_reference(spec, H, Hkv, paths):
    attn = ts.compile(spec, causal=True, backend="triton")
    for seed in range(3):  # the first call binds and assembles the group, the others copy it
        q, k, v = _qkv(H, Hkv, seed)
        dec = attn.decide(q, k)
        w = torch.randn(q.shape, generator=torch.Generator().manual_seed(100 + seed))
        before = dict(paths)
        got = _run(attn, q, k, v, dec, w)
        assert paths["bound"] == before["bound"] + 1 and paths["unbound"] == before["unbound"]
        with features.unbound_features():
            want = _run(attn, q, k, v, dec, w)
        assert paths["unbound"] == before["unbound"] + 2, "unbound_features(): keep_features a side"
        for name, a, b in zip(("out", "dq", "dk", "dv"), got, want, strict=True):
            assert torch.equal(a, b), f"{name} differs from the per-call path (seed {seed})"
        ref = _run(attn.reference, q, k, v, dec, w)
        for name, a, b in zip(("out", "dq", "dk", "dv"), got, ref, strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}")
        with torch.no_grad():  # no autograd node: the sides launched directly
            assert torch.equal(attn(q, k, v, decisions=dec), got[0])


def test_a_bound_call_refuses_supports_of_other_sizes():
    """The supports are checked per call (a group prepared elsewhere may not fit the signature):
    too few rows of heads would be read past their end."""
    q, k, _ = _qkv(2, 2, 0)
    bound = features.BoundFeatures((0, 1), q, k)

    class _Group:
        heads = (0, 1)
        q_support = torch.zeros((1, 1, 40, 3), dtype=torch.int32)
        k_support = torch.zeros((1, 2, 40, 3), dtype=torch.int32)

    with pytest.raises(ValueError, match="support must be"):
        bound(q, k, _Group())
    _Group.heads = (1, 0)
    with pytest.raises(ValueError, match="bound to query heads"):
        bound(q, k, _Group())
