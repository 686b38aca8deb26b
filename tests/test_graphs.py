"""``compile(spec, cuda_graphs=True)``: the slot logic of ``tilesparse.graphs`` on the CPU.

There is no GPU here, so the op records with :class:`~tilesparse.graphs.RerunRecorder`: a
replay reruns the eager call on the slot's tensors and copies the results into the tensors
the capture returned. That is what a CUDA graph does to a slot's buffers (fixed addresses,
overwritten by every replay), so these tests catch a slot reused while a call still needs it,
an output or a gradient handed out without a copy, and a signature that should capture anew.
tests/gpu/test_graphs_gpu.py runs the same calls through real CUDA graphs.
"""

from __future__ import annotations

import gc
import pickle

import pytest
import torch

import tilesparse as ts
from tilesparse.graphs import RerunRecorder

from builtin_specs import one_of_each_kind

SPECS = one_of_each_kind(keep=0.6, buckets=3, k=4, dense_head=1)
B, H, HKV, T, D = 1, 4, 2, 40, 16


def _graphed(spec, **kwargs):
    op = ts.compile(spec, causal=True, cuda_graphs=True, **kwargs)
    op._graphed().recorder = RerunRecorder
    return op


def _inputs(seed: int, t: int = T, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, t, D, generator=g, dtype=dtype).requires_grad_()
    k, v = (torch.randn(B, HKV, t, D, generator=g, dtype=dtype).requires_grad_() for _ in range(2))
    return q, k, v


def _grads(out, inputs, seed: int):
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    return torch.autograd.grad(out, inputs, go)


@pytest.mark.parametrize("kind", list(SPECS))
def test_replayed_layers_match_the_eager_op(kind):
    """Two steps of three layers, each step's forwards before its backwards (last layer first),
    fresh inputs and decisions every call: outputs and gradients equal the eager op's, one slot
    per layer, and what a step handed out stays as it was through the next step's replays."""
    spec = SPECS[kind]
    op = _graphed(spec)
    eager = ts.compile(spec, causal=True)
    kept = []  # (a copy made when handed out, the tensor handed out)
    for step in range(2):
        calls = []
        for layer in range(3):
            q, k, v = _inputs(10 * step + layer)
            dec = eager.decide(q, k) if spec.decision_fields else None
            out = op(q, k, v, decisions=dec)
            want = eager(q, k, v, decisions=dec)
            assert torch.equal(out, want), f"{kind} step {step} layer {layer}: forward"
            calls.append(((q, k, v), out, want))
        for layer, (inputs, out, want) in reversed(list(enumerate(calls))):
            grads = _grads(out, inputs, layer)
            for got, ref in zip(grads, _grads(want, inputs, layer), strict=True):
                assert torch.equal(got, ref), f"{kind} step {step} layer {layer}: gradient"
            kept += [(t.detach().clone(), t) for t in grads if t is not None]
        kept += [(out.detach().clone(), out) for _, out, _ in calls]
    for before, t in kept:
        assert torch.equal(before, t), "a replay overwrote an output or a gradient already handed out"
    assert op.graph_stats.captures == 3
    assert op.graph_stats.replays == 6
    assert not op.graph_stats.eager


def test_calls_without_gradients_share_one_slot():
    op = _graphed(SPECS["qkdrop"])
    eager = ts.compile(SPECS["qkdrop"], causal=True)
    outs = []
    with torch.no_grad():
        for seed in range(4):
            q, k, v = _inputs(seed)
            dec = eager.decide(q, k)
            outs.append((op(q, k, v, decisions=dec), eager(q, k, v, decisions=dec)))
    assert all(torch.equal(got, want) for got, want in outs)
    assert op.graph_stats.captures == 1


def test_a_call_dropped_before_its_backward_frees_its_slot():
    op = _graphed(SPECS["hash"])
    eager = ts.compile(SPECS["hash"], causal=True)
    q, k, v = _inputs(0)
    out = op(q, k, v, decisions=eager.decide(q, k))
    del out
    gc.collect()
    q, k, v = _inputs(1)
    dec = eager.decide(q, k)
    out = op(q, k, v, decisions=dec)
    assert op.graph_stats.captures == 1
    want = eager(q, k, v, decisions=dec)
    assert all(torch.equal(a, b) for a, b in zip(_grads(out, (q, k, v), 0), _grads(want, (q, k, v), 0), strict=True))


def test_a_second_backward_is_refused():
    op = _graphed(SPECS["dense"])
    q, k, v = _inputs(0)
    out = op(q, k, v)
    out.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="runs its backward once"):
        out.sum().backward()


def test_a_replayed_backward_is_first_order_only():
    op = _graphed(SPECS["dense"])
    q, k, v = _inputs(0)
    (dq, _, _) = torch.autograd.grad(op(q, k, v).sum(), (q, k, v), create_graph=True)
    with pytest.raises(RuntimeError, match="first order"):
        dq.sum().backward()


def test_a_new_signature_captures_anew():
    op = _graphed(SPECS["dense"])
    for t, dtype in ((T, torch.float32), (T, torch.float32), (T + 8, torch.float32), (T, torch.bfloat16)):
        q, k, v = _inputs(0, t, dtype)
        out = op(q, k, v)
        torch.autograd.grad(out.sum(), (q, k, v))
    assert op.graph_stats.captures == 3
    q, k, v = _inputs(0)
    op(q.detach(), k, v).sum().backward()  # q needs no gradient now: a signature of its own
    assert op.graph_stats.captures == 4
    q, k, v = _inputs(0)
    with pytest.raises(TypeError, match="q has dtype torch.float64"):  # the capture's own call checks
        op(q.double(), k, v)
    assert op.graph_stats.captures == 4 and op._graphed().slot_count() == 4


def test_the_compiled_scale_given_again_is_a_plain_call():
    op = _graphed(SPECS["dense"])
    q, k, v = _inputs(0)
    torch.testing.assert_close(op(q, k, v, scale=op.scale), ts.compile(SPECS["dense"], causal=True)(q, k, v))
    assert op.graph_stats.replays == 1 and not op.graph_stats.eager


def test_padded_and_packed_calls_replay():
    """Key padding and document ids (with ``max_documents``) are copied in as q, k, v are: each
    call's own mask and ids, outputs and gradients equal to the eager op's."""
    op = _graphed(SPECS["hybrid"])
    eager = ts.compile(SPECS["hybrid"], causal=True)
    for step in range(3):
        q, k, v = _inputs(step)
        dec = eager.decide(q, k)
        pad = torch.ones(B, T, dtype=torch.bool)
        pad[:, T - 3 - step :] = False
        docs = (torch.arange(T) >= 10 + 7 * step).long().expand(B, T)
        for kw in (dict(key_padding_mask=pad), dict(document_ids=docs, max_documents=4, key_padding_mask=pad)):
            got, want = op(q, k, v, decisions=dec, **kw), eager(q, k, v, decisions=dec, **kw)
            assert torch.equal(got, want), f"{sorted(kw)} step {step}"
            for a, b in zip(_grads(got, (q, k, v), step), _grads(want, (q, k, v), step), strict=True):
                assert torch.equal(a, b), f"{sorted(kw)} step {step} gradient"
    assert op.graph_stats.captures == 2 and op.graph_stats.replays == 6 and not op.graph_stats.eager


def test_calls_that_run_eagerly_are_counted_by_reason():
    op = _graphed(SPECS["qkdrop"])
    eager = ts.compile(SPECS["qkdrop"], causal=True)
    q, k, v = _inputs(0)
    dec = eager.decide(q, k)
    docs = (torch.arange(T) >= 10).long().expand(B, T)
    for kw in (dict(return_lse=True), dict(document_ids=docs)):
        got, want = op(q, k, v, decisions=dec, **kw), eager(q, k, v, decisions=dec, **kw)
        for a, b in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert torch.equal(a, b)
    assert op.graph_stats.eager == {
        "return_lse=True": 1, "document_ids without max_documents (their range is read back)": 1
    } and op.graph_stats.replays == 0
    cpu = ts.compile(SPECS["qkdrop"], causal=True, cuda_graphs=True)  # no stand-in recorder: CUDA graphs only
    cpu(q, k, v, decisions=dec)
    assert cpu.graph_stats.eager == {"inputs on cpu, not CUDA": 1}
    assert ts.compile(SPECS["qkdrop"], causal=True).graph_stats is None


@pytest.mark.parametrize("source", ["call_generator", "seed_resample", "seed_fixed"])
def test_decisions_made_in_a_replay_draw_as_the_eager_call(source):
    """The call's ``generator=``, the op's own (``seed=``), or a fresh one each call
    (``resample=False``): a replay draws what the eager call draws, forward and backward, and
    leaves the generator where the eager call leaves it."""
    kw = {"call_generator": {}, "seed_resample": dict(seed=3), "seed_fixed": dict(seed=3, resample=False)}[source]
    op, eager = _graphed(SPECS["hybrid"], **kw), ts.compile(SPECS["hybrid"], causal=True, **kw)
    gens = [torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)]
    for step in range(3):
        q, k, v = _inputs(step)
        outs = []
        for attn, gen in zip((op, eager), gens, strict=True):
            out = attn(q, k, v, generator=gen if source == "call_generator" else None)
            outs.append((out, _grads(out, (q, k, v), step)))
        (got, got_grads), (want, want_grads) = outs
        assert torch.equal(got, want), f"{source} step {step}"
        assert all(torch.equal(a, b) for a, b in zip(got_grads, want_grads, strict=True))
    assert torch.equal(gens[0].get_state(), gens[1].get_state())
    assert op.graph_stats.captures == 1 and op.graph_stats.replays == 3 and not op.graph_stats.eager


def test_a_bad_id_in_a_replayed_call_is_an_error():
    op = _graphed(SPECS["hash"])
    q, k, v = _inputs(0)
    dec = op.decide(q, k)
    op(q, k, v, decisions=dec)
    bad = ts.Decisions(q_bucket=dec.q_bucket.clone().fill_(SPECS["hash"].buckets), k_bucket=dec.k_bucket)
    with pytest.raises(ValueError, match="q_bucket"):
        op(q, k, v, decisions=bad)


def test_cuda_graphs_must_be_a_bool():
    with pytest.raises(TypeError, match="cuda_graphs must be a bool"):
        ts.compile(SPECS["dense"], cuda_graphs=1)


def test_a_pickled_op_replays_afresh():
    op = _graphed(SPECS["dense"])
    q, k, v = _inputs(0)
    op(q, k, v)
    copy = pickle.loads(pickle.dumps(op))
    assert copy.cuda_graphs and copy.graph_stats.captures == 0
    copy._graphed().recorder = RerunRecorder
    torch.testing.assert_close(copy(q, k, v), op(q, k, v), rtol=0, atol=0)


def test_inference_mode_is_a_signature_of_its_own():
    """A slot made under ``torch.inference_mode`` holds inference tensors, which a call outside it
    cannot copy into."""
    op = _graphed(SPECS["dense"])
    q, k, v = (t.detach() for t in _inputs(0))
    with torch.inference_mode():
        first = op(q, k, v)
    with torch.no_grad():
        second = op(q, k, v)
    assert torch.equal(first, second) and op.graph_stats.captures == 2


def test_clear_graphs_frees_the_slots_and_many_slots_warn(monkeypatch):
    """Every signature keeps a slot: the op warns when it holds MANY_SLOTS of them (varying
    lengths), and clear_graphs() forgets them; a call still awaiting its backward keeps its own."""
    monkeypatch.setattr("tilesparse.graphs.MANY_SLOTS", 3)
    op = _graphed(SPECS["dense"])
    for t in (T, T + 1):
        op(*_inputs(0, t)).sum().backward()
    q, k, v = _inputs(0, T + 2)
    with pytest.warns(UserWarning, match="holds 3 CUDA graph slots") as caught:
        pending = op(q, k, v)
    assert caught[0].filename == __file__  # the warning points at the caller
    op.clear_graphs()
    assert op._graphed().slot_count() == 0
    grads = torch.autograd.grad(pending.sum(), (q, k, v))  # its slot lives on with its autograd node
    want = torch.autograd.grad(ts.compile(SPECS["dense"], causal=True)(q, k, v).sum(), (q, k, v))
    assert all(torch.equal(a, b) for a, b in zip(grads, want, strict=True))
    op(*_inputs(0, T)).sum().backward()
    assert op.graph_stats.captures == 4 and op._graphed().slot_count() == 1


def test_a_generator_on_another_device_runs_eagerly():
    """The eager call then raises what is wrong (only a CUDA machine has a generator to mismatch
    a CPU call with: the rule is checked on its own here)."""
    from types import SimpleNamespace

    from tilesparse.sdpa_call import PLAIN

    op = _graphed(SPECS["qkdrop"])
    q, _, _ = _inputs(0)
    cuda_generator = SimpleNamespace(device=torch.device("cuda"))
    assert op._replay_refusal(q, None, PLAIN, cuda_generator) == "a generator on cuda for inputs on cpu"
    assert op._replay_refusal(q, None, PLAIN, torch.Generator()) is None
