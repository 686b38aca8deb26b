"""The CUDA kernels themselves (``kernels/sfa.cu``, ``kernels/index.cu``), run on the CPU by a
small CUDA emulator (``cuda_emulator.h``: threads as fibers, real block and warp barriers,
shuffles and warp matches through barriers), launched with the same arguments, grids and
block sizes as on the GPU:

- feature-intersection attention against the reference: outputs and the gradients of q, k, v
  over random TopKFeatures specs (alone, with Hash, with QKDrop, under PerHead), edge-case
  decisions, causal or not, GQA, T not a multiple of 64, every dtype, D in {16, 32, 64}, and
  fixed cases at D = 128 and 256 with the largest k that fits;
- the fused index build against ``prepare_group``, tensor for tensor, every layout, and the
  LSH kernel against the ``lsh`` criterion (every dtype).

What the emulator cannot show: races a barrier-free schedule would expose on real hardware
beyond missing barriers (fibers switch only at barriers), shared-memory capacity, performance.
Skipped without g++. CPU only; T <= 300.
"""

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse import ir
from tilesparse.backends.cupy import index as cindex
from tilesparse.patterns import get_criterion
from tilesparse.patterns.criteria import lsh_draw
from tilesparse.testing import assert_equivalent, attention_inputs, decisions

from feature_ops import FeatureOp, topk_specs

emulate = pytest.importorskip("emulate")
pytestmark = pytest.mark.skipif(emulate.available() is not None, reason=str(emulate.available()))

FIELDS = ("q_order", "q_pos", "q_bucket", "k_order", "k_pos", "k_bucket", "q_ranges", "q_nseg", "k_ranges", "k_nseg")


def EmulatedOp(spec, *, causal):
    return FeatureOp(spec, causal=causal, make_impl=emulate.EmulatedKernels)


@settings(max_examples=100)
@given(data=st.data(), causal=st.booleans())
def test_emulated_kernels_equal_the_reference(data, causal):
    q, k, v = data.draw(attention_inputs(seqlen=st.integers(1, 300), head_dim=st.sampled_from([16, 32, 64])))
    spec = data.draw(topk_specs(q.shape[1]))
    dec = data.draw(decisions(spec, q.shape))
    assert_equivalent(EmulatedOp(spec, causal=causal), q, k, v, decisions=dec)


@pytest.mark.parametrize(
    ("spec", "D", "dtype", "causal"),
    [
        (ts.Hybrid(parts=[ts.QKDrop(keep=0.7), ts.Hash(buckets=3), ts.TopKFeatures(k=32)]), 256, torch.bfloat16, True),
        (ts.TopKFeatures(k=16), 128, torch.float16, False),
        (ts.PerHead(dense_heads=[1], rest=ts.TopKFeatures(k=4)), 256, torch.float32, True),
    ],
    ids=["D256-k32-bf16", "D128-k16-fp16", "D256-k4-fp32-perhead"],
)
def test_emulated_kernels_at_large_head_dims(spec, D, dtype, causal):
    """The largest shared-memory layouts (the launch's canary checks their sizes) and every dtype."""
    g = torch.Generator().manual_seed(D)
    q = torch.randn(1, 2, 130, D, generator=g).to(dtype)
    k, v = (torch.randn(1, 2, 130, D, generator=g).to(dtype) for _ in range(2))
    dec = ts.compile(spec).decide(q, k, generator=g)
    assert_equivalent(EmulatedOp(spec, causal=causal), q, k, v, decisions=dec)


@pytest.fixture
def emulated_index(monkeypatch):
    monkeypatch.setattr(cindex, "_launch", emulate.emulated_index_launch)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])  # the patch holds for every example
@given(data=st.data(), causal=st.booleans(), blocks=st.sampled_from([(64, 64), (128, 64), (32, 16)]),
       T=st.integers(1, 200))  # fmt: skip
def test_emulated_index_build_equals_prepare(emulated_index, data, causal, blocks, T):
    spec = data.draw(st.sampled_from([ts.Dense(), ts.QKDrop(keep=0.6), ts.Hash(buckets=5), ts.Hash(buckets=3, attend_self=False),
                                      ts.Hybrid(parts=[ts.Hash(buckets=8), ts.QKDrop(keep=0.7)])]))  # fmt: skip
    B, H = 2, 2
    dec = data.draw(decisions(spec, (B, H, T, 8)))
    program = ir.lower(spec, causal=causal, block_q=blocks[0], block_k=blocks[1])
    group = program.groups[0]
    kw = dict(batch=B, seqlen=T, device="cpu")
    want = ir.prepare_group(program, group, (0, 1), dec, heads=H, **kw)
    x = torch.zeros(B, H, T, 8)
    got = cindex.build_group(program, group, (0, 1), dec, ir.check_inputs(x, x, x))
    for f in FIELDS:
        assert torch.equal(getattr(got, f), getattr(want, f)), f"{f} differs: {spec} causal={causal} T={T} blocks={blocks}"


def test_emulated_index_build_spans_several_chunks(emulated_index):
    """T past CHUNK tokens: the scatter's offsets come from earlier chunks' histograms."""
    T = cindex.CHUNK * 2 + 77
    spec = ts.Hybrid(parts=[ts.Hash(buckets=6), ts.QKDrop(keep=0.6)])
    q, k = (torch.randn(1, 1, T, 8, generator=torch.Generator().manual_seed(i)) for i in range(2))
    dec = ts.compile(spec).decide(q, k, generator=torch.Generator().manual_seed(0))
    program = ir.lower(spec, causal=True, block_q=64, block_k=64)
    kw = dict(batch=1, seqlen=T, device="cpu")
    want = ir.prepare_group(program, program.groups[0], (0,), dec, heads=1, **kw)
    got = cindex.build_group(program, program.groups[0], (0,), dec, ir.check_inputs(q, k, k))
    for f in FIELDS:
        assert torch.equal(getattr(got, f), getattr(want, f)), f


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(("buckets", "D"), [(2, 32), (5, 8), (16, 32), (19, 40)])
def test_emulated_lsh_equals_the_criterion(emulated_index, buckets, D, dtype):
    """The first launch's hashing (a warp per token) against the criterion: head dims below,
    at and past one warp's width, odd bucket counts (the -xR half one column shorter)."""
    g = torch.Generator().manual_seed(buckets)
    q, k = (torch.randn(2, 3, 130, D, generator=g).to(dtype) for _ in range(2))
    k = k[:, :1]  # GQA: one kv head for three query heads
    k3 = k.expand(2, 3, 130, D)
    want_q, want_k = get_criterion("lsh")(q, k3, buckets=buckets, generator=torch.Generator().manual_seed(1))
    rot = lsh_draw(3, D, buckets, "cpu", generator=torch.Generator().manual_seed(1))
    got_q, got_k = cindex.lsh_buckets(q, k, rot, (0, 1, 2), buckets)
    agree = float(((got_q == want_q).float().mean() + (got_k == want_k).float().mean()) / 2)
    # the projection is summed in another order than torch's matmul: a near-tie may flip
    assert agree >= (0.999 if dtype == torch.float32 else 0.98), f"only {agree:.4f} of the buckets agree"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_emulated_lsh_rounds_the_draw_to_the_inputs_dtype(emulated_index, dtype):
    """Given the criterion's draw before its rounding, the kernel hashes as with the rotation
    rounded to the inputs' dtype: the same buckets."""
    g = torch.Generator().manual_seed(4)
    q, k = (torch.randn(1, 2, 200, 32, generator=g).to(dtype) for _ in range(2))
    draw = lsh_draw(2, 32, 16, "cpu", generator=torch.Generator().manual_seed(1))
    rounded = draw.to(dtype).float()
    assert dtype == torch.float32 or not torch.equal(draw, rounded)  # the rounding is not a no-op
    got = cindex.lsh_buckets(q, k, draw, (0, 1), 16)
    want = cindex.lsh_buckets(q, k, rounded, (0, 1), 16)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), causal=st.booleans(), T=st.integers(1, 300))
def test_emulated_hashing_build_equals_prepare_over_its_buckets(emulated_index, data, causal, T):
    """LSH in the first launch, then the sort and ranges: equal to prepare_group given the
    buckets the kernel wrote, with and without dropped tokens, GQA keys."""
    spec = data.draw(st.sampled_from([ts.Hash(buckets=6), ts.Hybrid(parts=[ts.Hash(buckets=4), ts.QKDrop(keep=0.6)])]))
    B, H, D = 1, 2, 16
    g = torch.Generator().manual_seed(T)
    q = torch.randn(B, H, T, D, generator=g)
    k = torch.randn(B, 1, T, D, generator=g)
    dec = ts.compile(spec).decide(q, k.expand(B, H, T, D), generator=g)
    keep = {"q_keep": dec.q_keep, "k_keep": dec.k_keep} if dec.q_keep is not None else {}
    program = ir.lower(spec, causal=causal, block_q=32, block_k=16)
    group = program.groups[0]
    rot = lsh_draw(H, D, group.buckets, "cpu", generator=g)
    kw = dict(batch=B, seqlen=T, device="cpu")
    got = cindex.build_group(program, group, (0, 1), ts.Decisions(**keep), ir.check_inputs(q, k, k), rotations=rot)
    qb, kb = cindex.lsh_buckets(q, k, rot, (0, 1), group.buckets)
    want = ir.prepare_group(program, group, (0, 1), ts.Decisions(q_bucket=qb.long(), k_bucket=kb.long(), **keep), heads=H, **kw)
    for f in FIELDS:
        assert torch.equal(getattr(got, f), getattr(want, f)), f"{f} differs: {spec} causal={causal} T={T}"
