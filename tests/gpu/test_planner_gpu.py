"""The planner and the torch integration on a real GPU (H200): what backend="auto" picks and
that it runs exactly, torch.compile(fullgraph=True) over the Triton path (aot_eager and
inductor) against eager, no re-plans, recompilations or kernel compilations over 100 training
steps, autocast, non-contiguous inputs, and no host syncs in the eager hot path."""

from __future__ import annotations

import pytest
import torch

import tilesparse as ts
from tilesparse.backends.triton.op import compiled_kernel_count
from tilesparse.ir import check_inputs
from tilesparse.planner import CostTable
from tilesparse.planner import plan as plan_module
from tilesparse.testing import AttentionBlock, assert_equivalent

DEVICE = torch.device("cuda")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def qkv(B=2, H=4, T=1024, D=64, dtype=torch.bfloat16, seed=0, grad=True):
    g = torch.Generator(DEVICE).manual_seed(seed)
    return tuple(torch.randn((B, H, T, D), generator=g, device=DEVICE, dtype=dtype).requires_grad_(grad) for _ in range(3))


@pytest.mark.parametrize(
    ("spec", "backends"),
    [
        (ts.Dense(), ["sdpa"]),
        (ts.Hash(buckets=1), ["sdpa"]),  # exactly dense: simplified
        (ts.TopKFeatures(k=64), ["sdpa"]),
        (ts.Hash(buckets=16), ["triton"]),
        (ts.QKDrop(keep=0.5), ["triton"]),
        (ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)]), ["triton"]),
    ],
    ids=str,
)
def test_auto_picks_and_runs_exactly(spec, backends):
    q, k, v = qkv(T=4096)
    attn = ts.compile(spec)
    assert [a.backend.NAME for a in attn.plan(q, k, v).assignments] == backends
    assert_equivalent(attn, q, k, v, decisions=attn.decide(q, k), atol=3e-2)


def test_per_head_runs_exactly_separate_and_fused(monkeypatch):
    spec = ts.PerHead(dense_heads=[0, 1], rest=ts.Hybrid(parts=[ts.Hash(buckets=8), ts.QKDrop(keep=0.7)]))
    q, k, v = qkv(H=6, T=2048)
    attn = ts.compile(spec)
    print(attn.explain(q, k, v))
    assert_equivalent(attn, q, k, v, decisions=attn.decide(q, k), atol=3e-2)
    # force the fusion: sdpa made costly
    shipped = plan_module.default_costs().to_dict()
    shipped["devices"]["cuda"]["sdpa"]["floor_ms"] = {"fwd": 50.0, "fwd_bwd": 50.0}
    monkeypatch.setattr(plan_module, "default_costs", lambda: CostTable.from_dict(shipped))
    fused = ts.compile(spec)
    (a,) = fused.plan(q, k, v).assignments
    assert a.backend.NAME == "triton" and a.dense_heads == (0, 1)
    assert_equivalent(fused, q, k, v, decisions=fused.decide(q, k), atol=3e-2)


def Block(attn):
    return AttentionBlock(attn, heads=4, head_dim=64)


@pytest.mark.parametrize("compiler", ["aot_eager", "inductor"])
@pytest.mark.parametrize(
    "spec", [ts.Dense(), ts.Hybrid(parts=[ts.Hash(buckets=8), ts.QKDrop(keep=0.6)]), ts.PerHead(dense_heads=[0], rest=ts.Hash())], ids=str
)
def test_torch_compile_fullgraph_matches_eager(spec, compiler):
    torch.manual_seed(0)
    model = Block(ts.compile(spec)).to(DEVICE, torch.bfloat16)
    x = torch.randn(2, 1024, 256, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)

    def run(m):
        torch.manual_seed(1)
        out = m(x)
        grads = torch.autograd.grad(out.float().square().sum(), [x, *m.parameters()])
        return out, grads

    want, want_grads = run(model)
    got, got_grads = run(torch.compile(model, fullgraph=True, backend=compiler))
    torch.testing.assert_close(got, want, atol=3e-2, rtol=3e-2)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w, atol=5e-2, rtol=5e-2)


def test_training_loop_neither_replans_nor_recompiles():
    attn = ts.compile(ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.6)]), validate=False)
    model = Block(attn).to(DEVICE, torch.bfloat16)
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    step = torch.compile(model, fullgraph=True, backend=counting)
    x = torch.randn(2, 2048, 256, device=DEVICE, dtype=torch.bfloat16)
    step(x).sum().backward()
    kernels = compiled_kernel_count()
    for i in range(100):
        torch.manual_seed(i)
        step(x).sum().backward()
    torch.cuda.synchronize()
    assert len(graphs) == 1
    assert compiled_kernel_count() == kernels, "fresh decisions compiled a new Triton kernel"
    assert attn.stats.plans == 2  # the forward op's plan and the backward's recomputation


def test_autocast_and_non_contiguous_inputs():
    attn = ts.compile(ts.Hash(buckets=8))
    q, k, v = qkv(T=1024, dtype=torch.float32, grad=False)
    dec = attn.decide(q, k)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = attn(q, k, v, decisions=dec)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, attn(q.bfloat16(), k.bfloat16(), v.bfloat16(), decisions=dec))
    base = torch.randn(2, 1024, 4, 128, device=DEVICE, dtype=torch.bfloat16)
    qt = base[..., ::2].transpose(1, 2)  # strided D: the kernels copy it, and explain says so
    kt, vt = (t.bfloat16().transpose(1, 2).contiguous().transpose(1, 2) for t in (k, v))
    assert "input copies: q (the kernels need unit stride" in attn.explain(qt, kt, vt, decisions=dec)
    assert_equivalent(attn, qt, kt, vt, decisions=dec, atol=3e-2)


def test_the_eager_hot_path_does_not_sync():
    attn = ts.compile(ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.6)]), validate=False)
    q, k, v = qkv(T=4096)
    dec = attn.decide(q, k)
    attn(q, k, v, decisions=dec).sum().backward()  # plans, compiles, caches the head map
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        attn(q, k, v, decisions=dec)
    finally:
        torch.cuda.set_sync_debug_mode(0)


@pytest.mark.parametrize("builder", ["cupy", "triton"])
@pytest.mark.parametrize("spec", [ts.Hash(buckets=16), ts.Hybrid(parts=[ts.Hash(buckets=8), ts.QKDrop(keep=0.6)])], ids=str)
def test_each_index_builder_runs_the_call_exactly(monkeypatch, spec, builder):
    """The index lines made to favour one builder: Triton hashes the op's lsh decisions in its
    index step (``fused_hash``: its hashing launch, then its build), or CuPy builds from the
    buckets the first-ranked hasher (Triton's kernel) made first; either way the call equals
    the reference over attn.decide's decisions with the same generator (the same kernel hashes
    both), outputs and gradients, GQA."""
    table = plan_module.default_costs().to_dict()
    cheap, dear = [0.01, 0.0], [5.0, 0.0]
    table["index"] = {"cuda": {"cupy+lsh": dear, "cupy": cheap if builder == "cupy" else dear, "lsh": [0.01, 0.0],
                               "triton+lsh": cheap if builder == "triton" else dear, "triton": dear}}  # fmt: skip
    monkeypatch.setattr(plan_module, "default_costs", lambda: CostTable.from_dict(table))
    g = torch.Generator(DEVICE).manual_seed(3)
    q = torch.randn((2, 4, 3000, 64), generator=g, device=DEVICE, dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn((2, 2, 3000, 64), generator=g, device=DEVICE, dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    attn = ts.compile(spec)
    (a,) = attn.plan(q, k, v).assignments
    assert (a.backend.NAME, a.builder.NAME, a.fused_hash) == ("triton", builder, builder == "triton")
    out = attn(q, k, v, generator=torch.Generator(DEVICE).manual_seed(11))
    dec = attn.decide(q, k, generator=torch.Generator(DEVICE).manual_seed(11))
    ref = attn.reference(q, k, v, decisions=dec)  # float32
    go = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), go)
    want = torch.autograd.grad(ref, (q, k, v), go.float())
    scale = ref.abs().max()
    assert (out.float() - ref).abs().max() <= 3e-2 * scale
    for got, ref_g in zip(grads, want, strict=True):
        assert (got.float() - ref_g).abs().max() <= 3e-2 * ref_g.abs().max().clamp_min(1e-6), "gradient differs"


def test_decide_hashes_the_lsh_buckets_with_the_triton_builder_on_cuda():
    """attn.decide() on CUDA hashes with the first-ranked builder's kernel (Triton's, one
    launch): it agrees with the criterion's torch ops except at near-ties of the rounded
    projection; the criterion itself stays the torch ops (the same draw of the rotation)."""
    from tilesparse.backends import lsh_hasher
    from tilesparse.ir import check_inputs
    from tilesparse.patterns import get_criterion
    from tilesparse.patterns.criteria import lsh_matmul

    g = torch.Generator(DEVICE).manual_seed(0)
    q, k = (torch.randn((2, 4, 4096, 128), generator=g, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    assert lsh_hasher(check_inputs(q, k, k), 16).NAME == "triton"
    dec = ts.compile(ts.Hash(buckets=16)).decide(q, k, generator=torch.Generator(DEVICE).manual_seed(1))
    qb, kb = dec.q_bucket, dec.k_bucket
    rot = torch.randn((4, 128, 8), generator=torch.Generator(DEVICE).manual_seed(1), device=DEVICE).to(q.dtype)
    wq, wk = lsh_matmul(q, k, rot, 16)
    differ = float(((qb != wq).float().mean() + (kb != wk).float().mean()) / 2)
    assert differ <= 2e-2, f"{differ:.2e} of the buckets differ"
    assert qb.dtype == torch.int32 and int(qb.max()) < 16 and int(qb.min()) >= 0
    cq, ck = get_criterion("lsh")(q, k, buckets=16, generator=torch.Generator(DEVICE).manual_seed(1))
    assert torch.equal(cq, wq) and torch.equal(ck, wk)


def test_groups_whose_backends_want_different_tiles_run_exactly():
    # the property run's case: at D=256 in fp32 Triton reads 32x32 tiles and the CuPy feature
    # kernels 64x64, and the dense heads and the feature-sparse rest share one index tile size
    rest = ts.Hybrid(parts=[ts.QKDrop(keep=0.5), ts.Hash(buckets=64, attend_self=False), ts.TopKFeatures(k=32)])
    spec = ts.PerHead(dense_heads=[0, 1, 2, 3, 4, 6], rest=rest)
    g = torch.Generator(DEVICE).manual_seed(3270327)
    q = torch.randn((1, 8, 7791, 256), generator=g, device=DEVICE).requires_grad_()
    k, v = (torch.randn((1, 2, 7791, 256), generator=g, device=DEVICE).requires_grad_() for _ in range(2))
    attn = ts.compile(spec, causal=False)
    plan = attn.plan(q, k, v)
    print(attn.explain(q, k, v))
    inputs = check_inputs(q, k, v, scale=attn.scale)
    tiles = (plan.program.block_q, plan.program.block_k)
    assert all(a.backend.blocks(inputs) == tiles for a in plan.assignments if a.backend.needs_prepare)
    assert_equivalent(attn, q, k, v, decisions=attn.decide(q, k), atol=2e-3)
