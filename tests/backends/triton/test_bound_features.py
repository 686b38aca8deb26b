"""TopKFeatures' q~ and k~ bound to the call signature (``features.BoundFeatures``, and the
group copied per index build with the call's supports) against the per-call path that
``unbound_features()`` restores: CPU, Triton under the interpreter, fp32, small sizes.

Each call has fresh tensors and decisions (a group or a binding that kept a previous call's
supports would show against the reference); outputs and gradients are bitwise those of the
per-call path and within tolerance of the reference, with and without GQA, for a group of every
head and one of some heads, with and without a gradient to take. Both sides' launch
(``_keep_features_pair``, forward and backward) writes bit for bit what a launch a side writes,
for sides of different lengths, and a gradient taken for one side alone launches that side's.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _supports(heads: int, T: int, D: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A q and a k support of 3 distinct feature ids a token, (1, heads, T, 3) int32."""
    return tuple(torch.rand((1, heads, T, D), generator=torch.Generator().manual_seed(s)).argsort(-1)[..., :3].int()
                 for s in (1, 2))  # fmt: skip


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


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_both_sides_in_one_launch_write_what_a_launch_a_side_writes(data):
    """:meth:`BoundFeatures.keep` and :meth:`BoundFeatures.grads` (one launch for q and k)
    against each side's own launch, bit for bit: Tq <= Tk (the pair's row tiles cover the longer
    side, the shorter one's extra tiles write nothing), GQA, a group of some heads, 16-bit and fp32."""
    B = data.draw(st.integers(1, 2))
    Hkv = data.draw(st.integers(1, 2))
    H = Hkv * data.draw(st.integers(1, 3))
    heads = tuple(data.draw(st.permutations(range(H)))[: data.draw(st.integers(1, H))])
    Tk = data.draw(st.integers(1, 80))
    Tq = data.draw(st.integers(1, Tk))
    D = data.draw(st.sampled_from([8, 16, 64, 96]))
    n_keep = data.draw(st.integers(1, min(D, 6)))
    dtype = data.draw(st.sampled_from([torch.float32, torch.bfloat16]))
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    q = torch.randn((B, H, Tq, D), generator=g).to(dtype)
    k = torch.randn((B, Hkv, Tk, D), generator=g).to(dtype)
    sq, sk = (torch.rand((B, len(heads), T, D), generator=g).argsort(-1)[..., :n_keep].to(torch.int32)
              for T in (Tq, Tk))  # fmt: skip
    bound = features.BoundFeatures(heads, q, k)
    assert bound.keep_pair is not None and bound.grad_pair is not None
    q_kept, k_kept = bound.keep(q, k, sq, sk)
    assert torch.equal(q_kept, bound.q.keep(q, sq)) and torch.equal(k_kept, bound.k.keep(k, sk))
    assert torch.equal(q_kept, features.keep_features(q, sq, heads, H))
    assert torch.equal(k_kept, features.keep_features(k, sk, heads, H))
    dq_kept = torch.randn((B, H, Tq, D), generator=g).to(dtype)
    dk_kept = torch.randn((B, H, Tk, D), generator=g).to(dtype)
    dq, dk = bound.grads(dq_kept, dk_kept, sq, sk)
    assert dq.shape == q.shape and dk.shape == k.shape
    assert torch.equal(dq, bound.q.grad(dq_kept, sq)) and torch.equal(dk, bound.k.grad(dk_kept, sk))


@pytest.mark.parametrize("side", ["q", "k"])
def test_a_gradient_for_one_side_launches_that_side_alone(side, monkeypatch):
    """With one of q and k needing its gradient, the backward launches that side's gradient
    alone (the other side's is never computed) and it equals the per-call path's."""
    q, k, _ = _qkv(4, 2, 0)
    sq, sk = _supports(4, 40, 16)
    bound = features.BoundFeatures((0, 1, 2, 3), q, k)
    leaves = {"q": q.clone().requires_grad_(side == "q"), "k": k.clone().requires_grad_(side == "k")}
    pairs, grads = [], features.BoundFeatures.grads
    monkeypatch.setattr(features.BoundFeatures, "grads", lambda self, *a: pairs.append(a) or grads(self, *a))
    q_kept, k_kept = bound.pair(leaves["q"], leaves["k"], sq, sk)
    w = torch.randn(q_kept.shape, generator=torch.Generator().manual_seed(3))
    (got,) = torch.autograd.grad((q_kept * w).sum() + (k_kept * w).sum(), leaves[side])
    assert not pairs, "one side's gradient taken: no pair launch"
    x, support = (q, sq) if side == "q" else (k, sk)
    x = x.clone().requires_grad_()
    (want,) = torch.autograd.grad((features.keep_features(x, support, (0, 1, 2, 3), 4) * w).sum(), x)
    assert torch.equal(got, want)


def test_sides_apart_launches_a_side_a_launch(monkeypatch):
    """``sides_apart()`` (the A/B switch) launches each side's kernel alone, forward and
    backward, and gives what the pair gives."""
    from triton.runtime.interpreter import InterpretedFunction

    names, run = [], InterpretedFunction.run

    def counted(self, *args, **kwargs):
        names.append(self.fn.__name__)
        return run(self, *args, **kwargs)

    monkeypatch.setattr(InterpretedFunction, "run", counted)
    q, k, _ = _qkv(4, 2, 0)
    sq, sk = _supports(2, 40, 16)
    bound = features.BoundFeatures((2, 0), q, k)
    results = {}
    for apart in (False, True):
        names.clear()
        with features.sides_apart() if apart else contextlib.nullcontext():
            kept = bound.keep(q, k, sq, sk)
            grads = bound.grads(*kept, sq, sk)
        want = ["_keep_features"] * 4 if apart else ["_keep_features_pair"] * 2
        assert names == want, (apart, names)
        results[apart] = (*kept, *grads)
    for a, b in zip(results[False], results[True], strict=True):
        assert torch.equal(a, b)
