"""The ``lsh`` hashing kernel (backends/triton/hashing.py) against the criterion's definition, and
the Triton builder hashing inside a call (interpreter on the CPU; tests/gpu repeats the call on
the H200)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.backends import BUILDERS, HashingBuilder, lsh_hasher
from tilesparse.backends.triton import hashing
from tilesparse.ir import check_inputs
from tilesparse.patterns.criteria import lsh_draw, lsh_matmul, lsh_rotation


def _directions(x: torch.Tensor, rot: torch.Tensor, buckets: int) -> torch.Tensor:
    """[xR, -xR[:, :buckets - half]] in float64: the values the argmax runs over."""
    proj = x.double() @ rot.double()
    half = rot.shape[-1]
    return torch.cat([proj, -proj[..., : buckets - half]], dim=-1)


@settings(max_examples=20, deadline=None)
@given(
    B=st.integers(1, 2),
    kv_heads=st.integers(1, 2),
    group=st.sampled_from([1, 2]),
    T=st.integers(1, 150),
    D=st.sampled_from([8, 16, 48, 64]),
    buckets=st.integers(2, 40),
    dtype=st.sampled_from([torch.float32, torch.bfloat16, torch.float16]),
    seed=st.integers(0, 2**16),
)
def test_the_kernel_takes_the_criterions_argmax(B, kv_heads, group, T, D, buckets, dtype, seed):
    """Every bucket is an argmax of [xR, -xR'] (up to the fp32 rounding of the projection:
    a near-tie may go either way), in range, and on fp32 inputs the buckets are the
    criterion's torch ops' own but for such near-ties; keys hash per kv head with each query
    head's rotation (GQA), T not a multiple of the block."""
    H = kv_heads * group
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, D, generator=g).to(dtype)
    k = torch.randn(B, kv_heads, T, D, generator=g).to(dtype)
    rot = lsh_rotation(H, D, buckets, dtype, "cpu", g).float()
    qb, kb = (torch.full((B, H, T), -7, dtype=torch.int32) for _ in range(2))
    hashing.hash_into(q, k, rot, buckets, qb, kb)
    k_heads = k.repeat_interleave(group, dim=1)
    want_q, want_k = lsh_matmul(q.float(), k_heads.float(), rot, buckets)
    for got, want, x in ((qb, want_q, q), (kb, want_k, k_heads)):
        assert got.min() >= 0 and got.max() < buckets
        vals = torch.einsum("bhtd,hdc->bhtc", x.double(), rot.double())
        dirs = torch.cat([vals, -vals[..., : buckets - math.ceil(buckets / 2)]], dim=-1)
        best = dirs.max(-1).values
        chosen = dirs.gather(-1, got.long().unsqueeze(-1)).squeeze(-1)
        tol = 1e-4 * (1 + best.abs())
        assert bool((chosen >= best - tol).all()), "a bucket that is not the argmax"
        if dtype == torch.float32:
            differ = got != want
            picked_by_torch = dirs.gather(-1, want.long().unsqueeze(-1)).squeeze(-1)
            assert bool((chosen[differ] - picked_by_torch[differ]).abs().le(tol[differ]).all()), "differs beyond a tie"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=str)
def test_the_kernel_rounds_the_draw_to_the_inputs_dtype(dtype):
    """Given the criterion's draw before its rounding (what an op's decide step passes), the
    kernel hashes as with the rotation rounded to the inputs' dtype: the same buckets. (bf16 on
    the GPU: tests/gpu/test_triton_gpu.py; the interpreter's fp32 -> bf16 cast truncates.)"""
    g = torch.Generator().manual_seed(11)
    q = torch.randn(2, 4, 300, 64, generator=g).to(dtype)
    k = torch.randn(2, 2, 300, 64, generator=g).to(dtype)
    draw = lsh_draw(4, 64, 16, "cpu", torch.Generator().manual_seed(2))
    rounded = lsh_rotation(4, 64, 16, dtype, "cpu", torch.Generator().manual_seed(2)).float()
    assert dtype == torch.float32 or not torch.equal(draw, rounded)  # the rounding is not a no-op
    got, want = ([torch.empty(2, 4, 300, dtype=torch.int32) for _ in range(2)] for _ in range(2))
    hashing.hash_into(q, k, draw, 16, *got)
    hashing.hash_into(q, k, rounded, 16, *want)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_the_kernel_reads_strided_inputs():
    """q and k as transposed views ((B, T, H, D) memory, as a model's projections give them):
    the same buckets as from contiguous copies."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(1, 37, 4, 16, generator=g).transpose(1, 2)
    k = torch.randn(1, 37, 2, 16, generator=g).transpose(1, 2)
    rot = lsh_rotation(4, 16, 9, torch.float32, "cpu", g).float()
    got, want = ([torch.empty(1, 4, 37, dtype=torch.int32) for _ in range(2)] for _ in range(2))
    hashing.hash_into(q, k, rot, 9, *got)
    hashing.hash_into(q.contiguous(), k.contiguous(), rot, 9, *want)
    assert not q.is_contiguous() and all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_the_kernel_refuses_buffers_that_do_not_fit():
    q = torch.randn(1, 2, 10, 16)
    rot = lsh_rotation(2, 16, 4, torch.float32, "cpu").float()
    good = torch.empty(1, 2, 10, dtype=torch.int32)
    with pytest.raises(ValueError, match="q_bucket must be a contiguous \\(1, 2, 10\\) int32"):
        hashing.hash_into(q, q, rot, 4, torch.empty(1, 2, 10, dtype=torch.int64), good)
    with pytest.raises(ValueError, match="do not fit 2 heads of dim 16 and 6 buckets"):
        hashing.hash_into(q, q, rot, 6, good, good.clone())
    with pytest.raises(ValueError, match="k of shape \\(1, 2, 9, 16\\) does not fit"):
        hashing.hash_into(q, q[:, :, :9], rot, 4, good, good.clone())


def test_the_triton_builder_hashes_on_cuda_only_and_within_its_limits():
    triton_builder = BUILDERS["triton"]
    assert isinstance(triton_builder, HashingBuilder)
    cpu = check_inputs(*torch.randn(3, 1, 2, 32, 16).unbind(0))
    assert "the criterion's torch matmul hashes faster" in triton_builder.hash_reasons(cpu, 16)[0]
    assert lsh_hasher(cpu, 16) is None  # on the CPU the criterion's own torch ops hash
    assert hashing.lsh_hash_reasons("cuda", 128, 256, False) == []
    assert hashing.lsh_hash_reasons("cuda", 128, 257, False) == [
        "257 buckets: the hashing kernel holds at most 128 directions (256 buckets)"
    ]
    assert hashing.lsh_hash_reasons("cuda", 512, 16, False) == ["head dim 512 > 256"]


@pytest.mark.parametrize("spec", [ts.Hash(buckets=5), ts.Hybrid(parts=[ts.Hash(buckets=4), ts.QKDrop(keep=0.6)])])
def test_a_call_that_hashes_in_the_triton_builder_is_exact(spec, monkeypatch):
    """With the Triton builder as the hasher (as on CUDA), a call that makes its decisions hashes
    in the build (``fused_hash``), gives the buckets ``attn.decide`` gives with the same
    generator, and its output and gradients are the masked dense reference's under them."""
    monkeypatch.setattr(hashing, "lsh_hash_reasons", lambda *a: [])
    attn = ts.compile(spec, causal=True, backend="triton")
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 4, 70, 16, generator=g).requires_grad_(True)
    k, v = (torch.randn(1, 2, 70, 16, generator=g).requires_grad_(True) for _ in range(2))  # GQA: two kv heads
    plan = attn.plan(q, k, v)
    assert plan.assignments[0].fused_hash and plan.assignments[0].builder.NAME == "triton"
    assert "decide[triton]" in plan.describe()
    assert "index builder: triton (hashes the lsh buckets in a launch of its own, before its build)" in plan.describe()
    out = attn(q, k, v, generator=torch.Generator().manual_seed(5))
    dec = attn.decide(q, k, generator=torch.Generator().manual_seed(5))
    monkeypatch.undo()  # the criterion's torch ops: the buckets agree but for near-ties
    torch_dec = attn.decide(q, k, generator=torch.Generator().manual_seed(5))
    assert (dec.q_bucket == torch_dec.q_bucket).float().mean() > 0.99
    ref = attn.reference(q, k, v, decisions=dec)
    torch.testing.assert_close(out, ref.to(out.dtype), atol=2e-5, rtol=2e-5)
    go = torch.randn_like(out)
    got = torch.autograd.grad(out, (q, k, v), go)
    want = torch.autograd.grad(ref, (q, k, v), go)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
