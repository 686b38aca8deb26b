"""A plan's steps bound per call signature (``tilesparse.execute.bound_steps``) and the op's
per-signature checks (``CompiledAttention._checked``): CPU, Triton under the interpreter.

What binding may not change: a call of a signature seen before runs the same steps on its own
tensors (outputs and gradients equal to the reference), a new size, scale or dtype binds or
checks anew, a bad input after good calls still raises the same error, and a configuration
override between calls is in force for the next call.
"""

from __future__ import annotations

import pytest
import torch

import tilesparse as ts
import tilesparse.execute as execute
from tilesparse.backends.triton import op


def _qkv(B=1, H=2, Hkv=1, T=40, D=16, dtype=torch.float32, seed=0, grad=True):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g, dtype=dtype)
    k, v = (torch.randn(B, Hkv, T, D, generator=g, dtype=dtype) for _ in range(2))
    return tuple(t.requires_grad_(grad) for t in (q, k, v))


def _grads(out, inputs, w):
    return torch.autograd.grad((out * w).sum(), inputs)


@pytest.mark.parametrize(
    "spec",
    [ts.Dense(), ts.QKDrop(keep=0.6), ts.Hash(buckets=3), ts.PerHead(dense_heads=[0], rest=ts.Hash(buckets=2))],
    ids=["dense", "qkdrop", "hash", "perhead"],
)
def test_calls_of_one_signature_bind_once_and_stay_exact(spec, monkeypatch):
    """Four calls with fresh tensors and decisions: the first two bind each step (the second's
    binding is kept), the others run the kept one; each call's output and gradients equal the
    reference's on its own inputs."""
    binds = []
    for kind, bind in list(execute._BIND.items()):
        monkeypatch.setitem(execute._BIND, kind, lambda plan, step, inputs, bind=bind: (binds.append(step), bind(plan, step, inputs))[1])
    attn = ts.compile(spec, causal=True, backend="triton")
    for seed in range(4):
        q, k, v = _qkv(seed=seed)
        dec = attn.decide(q, k, generator=torch.Generator().manual_seed(seed))
        w = torch.randn(q.shape, generator=torch.Generator().manual_seed(10 + seed))
        out = attn(q, k, v, decisions=dec)
        want = attn.reference(q, k, v, decisions=dec)
        torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
        for got, ref in zip(_grads(out, (q, k, v), w), _grads(want, (q, k, v), w), strict=True):
            torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)
    plan = attn.plan(q, k, v, decisions=dec)
    assert binds == 2 * list(plan.steps), "each step bound on the first two calls only"
    assert len(plan.bound) == 1 and plan.bound[next(iter(plan.bound))] is not None


def test_a_new_size_binds_anew_and_every_call_is_exact():
    """Sizes within one plan's size bucket get bound steps of their own (the first call of each
    leaves a mark, the second its binding); a call with another scale (an op of its own,
    sdpa_call) and one back at the first size are exact too."""
    spec = ts.Hash(buckets=3)
    attn = ts.compile(spec, causal=True, backend="triton")
    seen = []
    for T, scale in ((40, None), (41, None), (40, 0.3), (40, None)):
        q, k, v = _qkv(T=T, grad=False)
        dec = attn.decide(q, k, generator=torch.Generator().manual_seed(T))
        out = attn(q, k, v, decisions=dec, scale=scale)
        want = ts.compile(spec, causal=True, scale=scale, backend="reference")(q, k, v, decisions=dec)
        torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
        bound = attn.plan(q, k, v, decisions=dec).bound
        seen.append(sum(steps is not None for steps in bound.values()))
    assert seen == [0, 0, 0, 1], seen


def test_bad_inputs_after_good_calls_still_raise():
    """A signature cache hit never stands in for the checks of a call it does not match."""
    attn = ts.compile(ts.QKDrop(keep=0.5), causal=True, backend="triton")
    q, k, v = _qkv(grad=False)
    attn(q, k, v)
    with pytest.raises(TypeError, match="share one dtype"):
        attn(q, k.half(), v)
    with pytest.raises(ValueError, match="multiple of k's"):
        attn(torch.cat([q, q[:, :1]], dim=1), k.expand(1, 2, 40, 16), v.expand(1, 2, 40, 16))
    with pytest.raises(ValueError, match=r"decisions\.k_keep must have shape \(1, 2, 40\)"):
        attn(q, k, v, decisions=attn.decide(q[:, :, :39], k[:, :, :39]))
    torch.testing.assert_close(attn(q, k, v, decisions=(d := attn.decide(q, k))), attn.reference(q, k, v, decisions=d))


def test_per_head_dense_heads_out_of_range_raise_on_every_signature():
    """PerHead's dense heads are checked against each new head count, not only the first."""
    attn = ts.compile(ts.PerHead(dense_heads=[3], rest=ts.QKDrop(keep=0.5)), backend="triton")
    q, k, v = _qkv(H=4, Hkv=2, grad=False)
    attn(q, k, v)
    with pytest.raises(ValueError, match=r"PerHead.dense_heads \[3\] out of range for 2 query heads"):
        attn(*_qkv(H=2, Hkv=2, grad=False))


def test_a_configuration_override_between_calls_takes_effect():
    """``override_config`` between two calls of one signature rebinds the launches: the second
    call runs the overridden configuration (here: one masked loop everywhere), exactly."""
    attn = ts.compile(ts.QKDrop(keep=0.6), causal=True, backend="triton")
    q, k, v = _qkv(grad=False)
    dec = attn.decide(q, k)
    want = attn.reference(q, k, v, decisions=dec)
    torch.testing.assert_close(attn(q, k, v, decisions=dec), want, atol=1e-4, rtol=1e-4)
    seen = []
    real = op.Launches.__init__

    def recording(self, *args, **kw):
        real(self, *args, **kw)
        seen.append(self.flags["SINGLE_LOOP"])

    try:
        op.Launches.__init__ = recording
        with op.override_config(single_loop=2):
            torch.testing.assert_close(attn(q, k, v, decisions=dec), want, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(attn(q, k, v, decisions=dec), want, atol=1e-4, rtol=1e-4)
    finally:
        op.Launches.__init__ = real
    assert seen == [True, False], "bound anew under the override and again after it"


def test_bound_attention_refuses_another_group():
    """A bound attend step is one head group's: a prepared group of another is an error."""
    attn = ts.compile(ts.Hash(buckets=3), causal=True, backend="triton")
    other = ts.compile(ts.QKDrop(keep=0.5), causal=True, backend="triton")
    q, k, v = _qkv(grad=False)
    g = other.prepare(q, k, v).groups[0]
    plan = attn.plan(q, k, v)
    bound = op.BoundAttention(plan.assignments[0].group, 16, torch.float32, torch.device("cpu"))
    with pytest.raises(ValueError, match="bound to head group"):
        bound(q, k, v, g, 0.25)


def test_the_decide_step_is_bound_once_per_signature(monkeypatch):
    """A call that makes its decisions binds them (its hasher, selector and criteria chosen)
    once per kept binding of its signature (the bound decide step's memo; the first call's
    binding is not kept); ``attn.decide`` binds anew each time, so a changed registry reaches
    it. Each call's decisions are still drawn afresh: outputs equal the reference under the
    decisions ``attn.decide`` makes with the same generator."""
    import tilesparse.api as api

    made = []
    real = api.bind_decisions
    monkeypatch.setattr(api, "bind_decisions", lambda *a, **kw: made.append(kw["in_call"]) or real(*a, **kw))
    attn = ts.compile(ts.Hybrid(parts=[ts.Hash(buckets=3), ts.QKDrop(keep=0.6)]), causal=True, backend="triton")
    q, k, v = _qkv(grad=False)
    for seed in range(4):
        out = attn(q, k, v, generator=torch.Generator().manual_seed(seed))
        dec = attn.decide(q, k, generator=torch.Generator().manual_seed(seed))
        torch.testing.assert_close(out, attn.reference(q, k, v, decisions=dec), atol=1e-4, rtol=1e-4)
    assert made == [True, False, True, False, False, False], made  # two calls bind, then decide alone


def test_sizes_that_change_every_call_keep_no_binding():
    """A decode-like loop, one new length a call: nothing is kept for any size seen once, and
    each call is exact."""
    attn = ts.compile(ts.QKDrop(keep=0.6), causal=True, backend="triton")
    q, k, v = _qkv(T=48, grad=False)
    for T in range(33, 41):
        dec = attn.decide(q[:, :, :T], k[:, :, :T])
        out = attn(q[:, :, :T], k[:, :, :T], v[:, :, :T], decisions=dec)
        torch.testing.assert_close(out, attn.reference(q[:, :, :T], k[:, :, :T], v[:, :, :T], decisions=dec), atol=1e-4, rtol=1e-4)
    plan = attn.plan(q[:, :, :40], k[:, :, :40], v[:, :, :40], decisions=dec)
    assert len(plan.bound) == 8 and all(steps is None for steps in plan.bound.values())
    assert all(entry is None for entry in attn._signatures.values())
