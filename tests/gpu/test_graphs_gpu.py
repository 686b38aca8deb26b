"""``compile(spec, cuda_graphs=True)`` through real CUDA graphs (H200).

For every built-in pattern (backend="auto"), at B=2, H=8, Hkv=2, T=1,000 (not a multiple of a
block), D=64 and D=128, bf16:

- two steps of three layers (forwards, then backwards from the last layer), fresh inputs and
  given decisions every call: outputs and gradients equal the eager op's, three captures, and
  what the first step handed out is unchanged after the second step's replays;
- a replayed call, forward and backward, makes no host synchronization
  (``torch.cuda.set_sync_debug_mode("error")``);
- decisions made in the call draw afresh in every replay (QKDrop: two replays of the same
  inputs differ), from an op seeded with ``seed=`` too, and draw what the eager call draws from
  the same generator state (torch's, the call's ``generator=``, the op's own, a fresh one with
  ``resample=False``), the generators left where the eager calls leave them;
- calls with key padding and document ids (``max_documents``) replay the eager ones, without a
  host synchronization;
- a bad bucket id in a replayed call gives NaN and a clear ``ValueError`` from
  ``tilesparse.check_errors()``.

Run: ``TRITON_INTERPRET=0 python -m pytest -q -m gpu tests/gpu/test_graphs_gpu.py``.
"""

from __future__ import annotations

import gc

import pytest
import torch

import tilesparse as ts

from builtin_specs import given_decisions, one_of_each_kind

DEVICE = torch.device("cuda")
B, H, HKV, T = 2, 8, 2, 1000
SPECS = one_of_each_kind(keep=0.5, buckets=8, k=16)


@pytest.fixture(autouse=True)
def _collect():
    yield
    gc.collect()  # an earlier test's graphs freed now, not inside a later capture


def _inputs(seed: int, d: int):
    g = torch.Generator(DEVICE).manual_seed(seed)
    q, k, v = (torch.randn((B, heads, T, d), generator=g, device=DEVICE, dtype=torch.bfloat16).requires_grad_()
               for heads in (H, HKV, HKV))
    return q, k, v


def _grads(out, inputs, seed: int):
    g = torch.Generator(DEVICE).manual_seed(seed)
    return torch.autograd.grad(out, inputs, torch.randn(out.shape, generator=g, device=DEVICE, dtype=out.dtype))


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("name", list(SPECS))
def test_replayed_layers_match_the_eager_op(name, d):
    spec = SPECS[name]
    op = ts.compile(spec, cuda_graphs=True)
    eager = ts.compile(spec)
    kept = []
    for step in range(2):
        calls = []
        for layer in range(3):
            q, k, v = _inputs(10 * step + layer, d)
            dec = given_decisions(eager, q, k)
            out, want = op(q, k, v, decisions=dec), eager(q, k, v, decisions=dec)
            torch.testing.assert_close(out, want, rtol=0, atol=0, msg=f"{name} step {step} layer {layer}")
            calls.append(((q, k, v), out, want))
        for layer, (inputs, out, want) in reversed(list(enumerate(calls))):
            grads = _grads(out, inputs, layer)
            # dense heads run SDPA, whose backward may add in any order: a rounding apart
            tol = dict(rtol=2e-2, atol=2e-2) if name in ("dense", "perhead") else dict(rtol=0, atol=0)
            for got, ref in zip(grads, _grads(want, inputs, layer), strict=True):
                torch.testing.assert_close(got, ref, **tol, msg=f"{name} step {step} layer {layer} gradient")
            kept += [(t.clone(), t) for t in grads]
        kept += [(out.detach().clone(), out) for _, out, _ in calls]
    for before, t in kept:
        assert torch.equal(before, t), "a replay overwrote a tensor already handed out"
    assert op.graph_stats.captures == 3 and op.graph_stats.replays == 6 and not op.graph_stats.eager
    ts.check_errors()


@pytest.mark.parametrize("name", list(SPECS))
def test_a_replayed_call_does_not_sync(name):
    op = ts.compile(SPECS[name], cuda_graphs=True)
    q, k, v = _inputs(0, 64)
    for _ in range(2):
        torch.autograd.grad(op(q, k, v, decisions=given_decisions(op, q, k)).sum(), (q, k, v))
        torch.autograd.grad(op(q, k, v).sum(), (q, k, v))
    dec = given_decisions(op, q, k)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        torch.autograd.grad(op(q, k, v, decisions=dec).sum(), (q, k, v))
        torch.autograd.grad(op(q, k, v).sum(), (q, k, v))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    # given decisions and decisions made are two signatures (one for a pattern without decisions)
    assert op.graph_stats.captures == (2 if SPECS[name].decision_fields else 1) and not op.graph_stats.eager
    ts.check_errors()


@pytest.mark.parametrize("seed", [None, 5], ids=["global_generator", "seeded"])
def test_decisions_made_in_a_replay_are_drawn_afresh(seed):
    op = ts.compile(ts.QKDrop(keep=0.5), cuda_graphs=True, seed=seed)
    q, k, v = _inputs(0, 64)
    with torch.no_grad():
        first, second = op(q, k, v), op(q, k, v)
    assert op.graph_stats.replays == 2 and op.graph_stats.captures == 1
    assert first.isfinite().all() and second.isfinite().all()
    assert not torch.equal(first, second), "a replay repeated the captured draws"


@pytest.mark.parametrize("source", ["default", "call_generator", "seed_resample", "seed_fixed"])
def test_decisions_made_in_a_replay_are_the_eager_calls(source):
    """Drawn from torch's generator, the call's ``generator=``, the op's own (``seed=``) or a
    fresh one each call (``resample=False``): a replayed call's output and gradients equal the
    eager call's from the same generator state, and the generators end where the eager calls
    leave them."""
    kw = {"seed_resample": dict(seed=3), "seed_fixed": dict(seed=3, resample=False)}.get(source, {})
    spec = SPECS["hybrid"]
    op, eager = ts.compile(spec, cuda_graphs=True, **kw), ts.compile(spec, **kw)
    gens = [torch.Generator(DEVICE).manual_seed(7) for _ in range(2)]
    if source == "default":
        q, k, v = _inputs(0, 64)
        op(q, k, v)  # the capture's warm-up draws from torch's generator: done before the comparison
    for step in range(3):
        q, k, v = _inputs(step, 64)
        state = torch.cuda.get_rng_state()
        outs = []
        for attn, gen in zip((op, eager), gens, strict=True):
            torch.cuda.set_rng_state(state)
            out = attn(q, k, v, generator=gen if source == "call_generator" else None)
            outs.append((out, _grads(out, (q, k, v), step)))
        (got, got_grads), (want, want_grads) = outs
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"{source} step {step}")
        for a, b in zip(got_grads, want_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=f"{source} step {step} gradient")
    assert torch.equal(gens[0].get_state(), gens[1].get_state())
    assert op.graph_stats.replays == 3 + (source == "default") and not op.graph_stats.eager


@pytest.mark.parametrize("name", ["qkdrop", "hash", "hybrid", "perhead"])
def test_padded_and_packed_calls_replay_the_eager_ones(name):
    """Key padding and document ids with ``max_documents``, new ones every call: outputs and
    gradients equal to the eager op's, replayed without a host synchronization."""
    spec = SPECS[name]
    op, eager = ts.compile(spec, cuda_graphs=True), ts.compile(spec)
    for step in range(3):
        q, k, v = _inputs(step, 64)
        dec = given_decisions(eager, q, k)
        pad = torch.ones(B, T, dtype=torch.bool, device=DEVICE)
        pad[0, T - 50 - step :] = False
        docs = (torch.arange(T, device=DEVICE) >= 300 + 40 * step).long().expand(B, T)
        for kw in (dict(key_padding_mask=pad), dict(document_ids=docs, max_documents=4)):
            if step == 2:
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("error")
            try:
                got = op(q, k, v, decisions=dec, **kw)
                got_grads = _grads(got, (q, k, v), step)
            finally:
                torch.cuda.set_sync_debug_mode("default")
            want = eager(q, k, v, decisions=dec, **kw)
            torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"{name} {sorted(kw)} step {step}")
            tol = dict(rtol=2e-2, atol=2e-2) if name == "perhead" else dict(rtol=0, atol=0)  # SDPA's dense heads
            for a, b in zip(got_grads, _grads(want, (q, k, v), step), strict=True):
                torch.testing.assert_close(a, b, **tol, msg=f"{name} {sorted(kw)} step {step} gradient")
    assert op.graph_stats.captures == 2 and op.graph_stats.replays == 6 and not op.graph_stats.eager
    ts.check_errors()


def test_a_bad_bucket_id_in_a_replayed_call_raises_from_check_errors():
    op = ts.compile(ts.Hash(buckets=8), cuda_graphs=True)
    q, k, v = _inputs(3, 64)
    dec = given_decisions(op, q, k)
    op(q, k, v, decisions=dec)
    dec.q_bucket[0, 2, 100] = 8
    out = op(q, k, v, decisions=dec)
    assert out.isnan().all()
    with pytest.raises(ValueError, match=r"decisions\.q_bucket values must lie in \[0, 8\), got \[0, 8\]"):
        ts.check_errors()
    dec.q_bucket[0, 2, 100] = 0
    assert not op(q, k, v, decisions=dec).isnan().any()
    ts.check_errors()
