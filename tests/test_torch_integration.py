"""torch integration on the CPU: ``torch.compile(fullgraph=True)`` over a module that calls a
compiled attention traces without graph breaks (the call becomes tilesparse's custom ops) and
gives the eager outputs and gradients, on the reference, the executor and the interpreted
Triton path; a training loop with fresh decisions every step neither re-plans nor recompiles
(plans, dynamo graphs and Triton launch keys flat over 100 steps); the op works under
``torch.autocast`` and with non-contiguous inputs, and explain() says what it copies.

The compiled tests use the ``aot_eager`` backend (dynamo + AOTAutograd, which exercises the
fake implementations and the registered autograd; inductor adds C++ compilation, minutes on
two cores) and a counting backend for the recompilation test.
"""

from __future__ import annotations

import pytest
import torch

import tilesparse as ts
from tilesparse.backends.triton.op import launch_key, tile_config
from tilesparse.testing import AttentionBlock

@pytest.fixture(autouse=True)
def _fresh_dynamo():
    # dynamo caches per code object (AttentionBlock.forward is shared by every test): start each clean
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


SPECS = [
    ts.Dense(),
    ts.Hybrid(parts=[ts.Hash(buckets=4), ts.QKDrop(keep=0.6)]),
    ts.PerHead(dense_heads=[1], rest=ts.TopKFeatures(k=4)),
]


def _recording(graphs: list):
    """A dynamo backend that records each graph it is given into ``graphs`` and runs it as is."""

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return backend


def Block(attn, seed=0):
    torch.manual_seed(seed)
    return AttentionBlock(attn, heads=2, head_dim=16)


def _run(model, x, seed):
    torch.manual_seed(seed)  # the criteria draw from the global generator: same draws both ways
    out = model(x)
    out.square().sum().backward()
    grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    model.zero_grad()
    x.grad = None
    return out.detach(), grads


@pytest.mark.parametrize("backend", ["auto", "executor", "triton"])
@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_compiled_module_matches_eager(spec, backend):
    attn = ts.compile(spec, causal=True, backend=backend)
    model = Block(attn)
    x = torch.randn(2, 40, 32, requires_grad=True)
    want, want_grads = _run(model, x, seed=1)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    got, got_grads = _run(compiled, x, seed=1)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", ["executor", "triton"])
@pytest.mark.parametrize("spec", [ts.QKDrop(keep=0.6), ts.Hash(buckets=3)], ids=str)
def test_compiled_gqa_gradients_match_eager(spec, backend):
    """Grouped-query attention through the op's custom ops: the backward op's three gradients
    must be tensors of their own (torch refuses a custom op whose returns alias each other: a
    backward that summed dK and dV into the kv heads through one buffer failed here)."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn((1, 4, 40, 16), generator=g, requires_grad=True)
    k, v = (torch.randn((1, 2, 40, 16), generator=g, requires_grad=True) for _ in range(2))
    go = torch.randn((1, 4, 40, 16), generator=g)
    attn = ts.compile(spec, causal=True, backend=backend)
    dec = attn.decide(q, k, generator=g)

    def f(q, k, v):
        return attn(q, k, v, decisions=dec)

    want = torch.autograd.grad(f(q, k, v), (q, k, v), go)
    got = torch.autograd.grad(torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v), (q, k, v), go)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_compiled_calls_with_given_decisions():
    attn = ts.compile(ts.Hash(buckets=3), backend="executor")
    q, k, v = (torch.randn(1, 2, 30, 16, requires_grad=True) for _ in range(3))
    dec = attn.decide(q, k, generator=torch.Generator().manual_seed(0))
    f = torch.compile(lambda q, k, v, b1, b2: attn(q, k, v, decisions=ts.Decisions(q_bucket=b1, k_bucket=b2)),
                      fullgraph=True, backend="aot_eager")  # fmt: skip
    out = f(q, k, v, dec.q_bucket, dec.k_bucket)
    dq = torch.autograd.grad(out.sum(), q)[0]
    want = attn(q, k, v, decisions=dec)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(dq, torch.autograd.grad(want.sum(), q)[0])


@pytest.mark.parametrize("padded", [False, True], ids=["plain", "key_padding"])
@pytest.mark.parametrize("spec", [ts.Hash(buckets=4), ts.QKDrop(keep=0.6)], ids=str)
def test_sdpa_keywords_with_decisions_made_in_the_call_trace_without_graph_breaks(spec, padded):
    """What the transformers integration passes (scale=, a key padding mask): the criteria run
    inside the decide op, as in a plain call, so nothing they do (a generator, a kernel) is traced."""
    attn = ts.compile(spec, causal=True, backend="executor")
    q, k, v = (torch.randn(2, 2, 40, 16, requires_grad=True) for _ in range(3))
    kpm = None
    if padded:
        kpm = torch.ones(2, 40, dtype=torch.bool)
        kpm[1, :7] = False  # left padding of the second sequence

    def f(q, k, v):
        return attn(q, k, v, scale=0.3, key_padding_mask=kpm)

    def run(fn):
        torch.manual_seed(3)  # the criteria draw from the global generator: same draws both ways
        out = fn(q, k, v)
        return out.detach(), torch.autograd.grad(out.square().sum(), (q, k, v))

    want, want_grads = run(f)
    got, got_grads = run(torch.compile(f, fullgraph=True, backend="aot_eager"))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)


def test_an_op_with_its_own_generator_decides_in_an_op_cuda_graphs_leave_out():
    """torch.compile's CUDA graphs replay the draws of torch's default generators only, so a
    seeded op's decisions come from ``decide_seeded``, tagged cudagraph_unsafe; a plain op's
    from ``decide``. Both give the eager result."""
    graphs = []
    counting = _recording(graphs)

    q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))
    for seed, want_op in ((3, "tilesparse.decide_seeded"), (None, "tilesparse.decide")):
        attn = ts.compile(ts.Hash(buckets=4), causal=True, backend="executor", seed=seed)
        attn.resample = False  # the same draws every call (seed given) so eager and compiled agree
        graphs.clear()
        torch._dynamo.reset()
        torch.manual_seed(0)
        got = torch.compile(lambda q, k, v: attn(q, k, v), fullgraph=True, backend=counting)(q, k, v)
        torch.manual_seed(0)
        torch.testing.assert_close(got, attn(q, k, v))
        ops = {str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"}
        assert want_op in ops and not ({"tilesparse.decide", "tilesparse.decide_seeded"} - {want_op}) & ops
    assert torch.Tag.cudagraph_unsafe in torch.ops.tilesparse.decide_seeded.default.tags
    assert torch.Tag.cudagraph_unsafe not in torch.ops.tilesparse.decide.default.tags


def test_a_training_loop_neither_replans_nor_recompiles():
    attn = ts.compile(ts.QKDrop(keep=0.5), backend="reference")
    model = Block(attn)
    graphs = []
    counting = _recording(graphs)

    step = torch.compile(model, fullgraph=True, backend=counting)
    x = torch.randn(1, 32, 32)
    for i in range(100):  # fresh decisions (and compacted lengths) every step
        torch.manual_seed(i)
        step(x).sum().backward()
    assert len(graphs) == 1, f"{len(graphs)} dynamo compilations over 100 steps"
    # one plan for the forward op (no autograd inside it) and one for the backward op's
    # recomputation (gradients needed), then every call is a cache hit
    assert attn.stats.plans == 2 and attn.stats.hits == 198


def test_fresh_decisions_reuse_the_plan_and_the_triton_launches():
    attn = ts.compile(ts.Hybrid(parts=[ts.Hash(buckets=4), ts.QKDrop(keep=0.5)]), backend="triton")
    q, k, v = (torch.randn(1, 2, 64, 16, requires_grad=True) for _ in range(3))
    cfg = tile_config(16, q.dtype, q.device)
    keys = set()
    for i in range(6):
        attn(q, k, v, generator=torch.Generator().manual_seed(i)).sum().backward()
        (g,) = attn._last
        keys.add(launch_key(g, q, cfg))
    assert len(keys) == 1, "a decision changed what the kernels specialize on"
    assert attn.stats.plans == 1 and attn.stats.hits == 5
    # a new sequence length in the same power-of-two bucket shares the plan; another bucket plans
    attn(*(t[:, :, :50] for t in (q, k, v)))
    assert attn.stats.plans == 1
    attn(*(t[:, :, :20] for t in (q, k, v)))
    assert attn.stats.plans == 2


@pytest.mark.parametrize("backend", ["auto", "executor"])
def test_autocast_casts_the_inputs_and_runs_the_kernels_without_it(backend):
    attn = ts.compile(ts.Hash(buckets=2), backend=backend)
    q, k, v = (torch.randn(1, 2, 40, 16) for _ in range(3))
    dec = attn.decide(q, k, generator=torch.Generator().manual_seed(0))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attn(q, k, v, decisions=dec)
        mixed = attn(q.bfloat16(), k, v, decisions=dec)  # mixed dtypes are what autocast produces
    assert out.dtype == torch.bfloat16
    want = attn(q.bfloat16(), k.bfloat16(), v.bfloat16(), decisions=dec)
    assert torch.equal(out, want) and torch.equal(mixed, want)


def test_autocast_under_torch_compile():
    attn = ts.compile(ts.QKDrop(keep=0.5))
    model = Block(attn)
    x = torch.randn(1, 24, 32)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.manual_seed(0)
        got = compiled(x)
        torch.manual_seed(0)
        want = model(x)
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_non_contiguous_inputs(backend):
    attn = ts.compile(ts.Hash(buckets=2), backend=backend)
    g = torch.Generator().manual_seed(0)
    base = torch.randn(1, 40, 2, 32, generator=g)
    q = base.transpose(1, 2)  # (B, H, T, D) with T and H strides swapped: read in place
    k = torch.randn(1, 2, 40, 64, generator=g)[..., ::2]  # a strided last dim
    v = torch.randn(1, 2, 32, 40, generator=g).transpose(2, 3)  # D strided too
    dec = attn.decide(q, k, generator=g)
    ref = attn.reference(q, k, v, decisions=dec)
    torch.testing.assert_close(attn(q, k, v, decisions=dec), ref, atol=1e-4, rtol=0)
    text = attn.explain(q, k, v, decisions=dec)
    if backend == "triton":
        assert "input copies: k (the kernels need unit stride along D" in text and "v (the kernels" in text
        assert "q (" not in text.split("input copies:")[1].splitlines()[0]
    else:
        assert "input copies: none" in text
    assert "input copies: none" in attn.explain(q, q, q)


@pytest.mark.parametrize("spec", [ts.Hybrid(parts=[ts.Hash(buckets=4), ts.QKDrop(keep=0.6)]),
                                  ts.PerHead(dense_heads=[0], rest=ts.Hash(buckets=4))], ids=str)  # fmt: skip
def test_inductor_gradients_equal_eager(spec):
    """Inductor (fullgraph) on the CPU: outputs and gradients of a block equal eager ones. A
    backward that differentiated a forward graph kept behind the compiler (its saved output
    sharing the op output's memory, which inductor reuses) failed this, as the same test on the
    GPU did (tests/gpu/test_planner_gpu.py): Hybrid's gradients off by 10."""
    torch.manual_seed(0)
    model = AttentionBlock(ts.compile(spec, backend="executor"), heads=4, head_dim=16)
    x = torch.randn(2, 64, 64, requires_grad=True)

    def run(m):
        torch.manual_seed(1)  # the same decisions in both runs
        out = m(x)
        return out, torch.autograd.grad(out.square().sum(), [x, *m.parameters()])

    want, want_grads = run(model)
    got, got_grads = run(torch.compile(model, fullgraph=True, backend="inductor"))
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=1e-3, rtol=1e-3)
