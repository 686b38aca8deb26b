"""The Triton backend on a real GPU (H200): exactness against the masked dense reference,
outputs and all three gradients.

- property tests over random specs, decisions, shapes (T up to 4,096), GQA, fp16/bf16/fp32;
- spot checks at T = 16,384 and 32,768 against a float32 reference computed in query chunks;
- compilations stay flat over 50 calls with fresh decisions (no per-step recompiles).
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.ir import dense_mask
from tilesparse.backends.reference import feature_mask, masked_attention
from tilesparse.backends.triton.op import compiled_kernel_count
from tilesparse.testing import assert_equivalent

from builtin_specs import one_of_each_kind

DEVICE = torch.device("cuda")
EXAMPLES = int(os.environ.get("TILESPARSE_GPU_EXAMPLES", "120"))  # over all shards
# max error relative to the reference's largest magnitude, per input dtype
TOL = {torch.float32: 2e-3, torch.float16: 5e-3, torch.bfloat16: 3e-2}

SPECS = [
    *one_of_each_kind(keep=0.5, buckets=16, k=8, hybrid_buckets=8, perhead_buckets=4).values(),
    ts.QKDrop(keep=0.05),
    ts.Hash(buckets=3, attend_self=False),
    ts.Hash(buckets=1),
    ts.Hybrid(parts=[ts.TopKFeatures(k=4), ts.QKDrop(keep=0.5)]),
]


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().float() - b.detach().float()).abs().max() / b.detach().float().abs().max().clamp_min(1e-6))


def _check(attn, q, k, v, dec, tol):
    assert_equivalent(attn, q, k, v, decisions=dec, atol=tol)


# one shard per (dtype, D): pytest-xdist (-n 12) compiles the shards' kernels in parallel
SHARDS = [(dtype, D) for dtype in (torch.bfloat16, torch.float16, torch.float32) for D in (16, 40, 64, 128)]


@pytest.mark.parametrize("dtype,D", SHARDS, ids=[f"{str(d).removeprefix('torch.')}-D{D}" for d, D in SHARDS])
def test_triton_matches_reference(dtype, D):
    @settings(max_examples=max(1, EXAMPLES // len(SHARDS)), deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        spec=st.sampled_from(SPECS),
        causal=st.booleans(),
        T=st.one_of(st.integers(1, 300), st.integers(300, 4096)),
        heads=st.sampled_from([(2, 2), (4, 2), (3, 1)]),
        seed=st.integers(0, 2**31 - 1),
    )
    def check(spec, causal, T, heads, seed):
        H, Hkv = heads
        g = torch.Generator(DEVICE).manual_seed(seed)
        mk = lambda h: torch.randn((1, h, T, D), generator=g, device=DEVICE, dtype=dtype).requires_grad_()  # noqa: E731
        q, k, v = mk(H), mk(Hkv), mk(Hkv)
        attn = ts.compile(spec, causal=causal, backend="triton")
        dec = attn.decide(q, k, generator=g)
        _check(attn, q, k, v, dec, TOL[dtype])

    check()


def _chunked_reference(attn, q, k, v, dec, go, chunk=2048):
    """Reference output and gradients, a chunk of queries at a time (float32)."""
    B, H, T, D = q.shape
    qf, kf, vf = (t.detach().float().requires_grad_() for t in (q, k, v))
    inputs = ts.ir.check_inputs(q, k, v)
    out = torch.empty((B, H, T, D), device=q.device)
    sup = attn.spec.supports(dec)
    qfeat = kfeat = None
    if sup is not None:
        qfeat, kfeat = feature_mask(sup[0], D, torch.float32), feature_mask(sup[1], D, torch.float32)
    for i0 in range(0, T, chunk):
        i1 = min(T, i0 + chunk)
        mask = dense_mask(attn.spec, dec, causal=attn.causal, inputs=inputs, rows=(i0, i1))
        o = masked_attention(
            qf[:, :, i0:i1], kf, vf, mask, scale=D**-0.5,
            q_features=None if qfeat is None else qfeat[:, :, i0:i1], k_features=kfeat,
        )  # fmt: skip
        o.backward(go[:, :, i0:i1].float())
        out[:, :, i0:i1] = o.detach()
    return out, qf.grad, kf.grad, vf.grad


@pytest.mark.parametrize("shape", [(1, 2, 2, 64), (1, 8, 2, 128)], ids=["H2-D64", "H8-Hkv2-D128"])
@pytest.mark.parametrize("T", [16384, 32768])
@pytest.mark.parametrize(
    "spec", [ts.Hash(buckets=16), ts.QKDrop(keep=0.5), ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)])], ids=str
)
def test_long_sequences_against_chunked_reference(T, spec, shape):
    torch.manual_seed(T)
    B, H, Hkv, D = shape
    q = torch.randn((B, H, T, D), device=DEVICE, dtype=torch.bfloat16).requires_grad_()
    k, v = (torch.randn((B, Hkv, T, D), device=DEVICE, dtype=torch.bfloat16).requires_grad_() for _ in range(2))
    attn = ts.compile(spec, causal=True, backend="triton")
    dec = attn.decide(q, k)
    _assert_matches_chunked_reference(attn, q, k, v, dec, attn(q, k, v, decisions=dec), f"T={T}")


def _assert_matches_chunked_reference(attn, q, k, v, dec, out, where: str):
    """``out`` and its gradients against the chunked float32 reference under ``dec`` (bf16 tolerance)."""
    go = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), go)
    ref = _chunked_reference(attn, q, k, v, dec, go)
    for name, a, b in zip(("out", "dq", "dk", "dv"), (out, *grads), ref, strict=True):
        err = _rel_err(a, b)
        assert err <= TOL[torch.bfloat16], f"{name} at {where}: max error {err:.2e}"


def test_no_recompiles_over_fifty_steps():
    attn = ts.compile(ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.6)]), causal=True, backend="triton")
    q, k, v = (torch.randn((2, 4, 1000, 64), device=DEVICE, dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    attn(q, k, v).sum().backward()  # compile once
    before = compiled_kernel_count()
    assert before > 0
    for step in range(50):
        out = attn(q, k, v, generator=torch.Generator(DEVICE).manual_seed(step))
        out.sum().backward()
    torch.cuda.synchronize()
    assert compiled_kernel_count() == before, "fresh decisions recompiled a kernel"


@pytest.mark.parametrize("T", [1000, 4096, 16384, 50000])
@pytest.mark.parametrize(
    "spec",
    [ts.Hash(buckets=16), ts.Hash(buckets=64), ts.QKDrop(keep=0.5), ts.Hybrid(parts=[ts.Hash(buckets=16), ts.QKDrop(keep=0.7)])],
    ids=str,
)
def test_index_building_matches_torch_prepare(T, spec):
    """The fused index kernels (counting sort included) against the IR's torch prepare, bit for bit:
    the keys and their scatter in one launch (T <= 4,096: Hash's 16 chunks at 4,096) and in two
    or three (beyond)."""
    from tilesparse.backends.triton.index import build_group
    from tilesparse.backends.triton.op import tile_config
    from tilesparse.testing import assert_same_index_tensors

    torch.manual_seed(T)
    shape = (2, 4, T, 64)
    q, k = (torch.randn(shape, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    dec = ts.compile(spec, causal=True, backend="triton").decide(q, k)
    cfg = tile_config(64, torch.bfloat16, DEVICE)
    for causal in (True, False):
        assert_same_index_tensors(build_group, spec, dec, shape, causal=causal, blocks=(cfg.block_q, cfg.block_k), device=DEVICE)


@pytest.mark.parametrize("buckets", [8, 16, 64, 255])
def test_lsh_kernel_takes_the_argmax_at_scale(buckets):
    """The Triton hashing kernel at a real model's shape (B=1, H=32, Hkv=8, D=128, T=16,384,
    bf16): every bucket an argmax of [xR, -xR'] up to the fp32 rounding of the projection,
    and nearly all the criterion's torch ops' own (the rest near-ties, hashing.py)."""
    from tilesparse.backends.triton.hashing import hash_into
    from tilesparse.patterns.criteria import lsh_matmul, lsh_rotation

    B, H, Hkv, D, T = 1, 32, 8, 128, 16384
    g = torch.Generator(DEVICE).manual_seed(buckets)
    q = torch.randn(B, H, T, D, device=DEVICE, dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, Hkv, T, D, device=DEVICE, dtype=torch.bfloat16, generator=g)
    rot = lsh_rotation(H, D, buckets, q.dtype, DEVICE, g).float()
    qb, kb = (torch.full((B, H, T), -1, dtype=torch.int32, device=DEVICE) for _ in range(2))
    hash_into(q, k, rot, buckets, qb, kb)
    k_heads = k.repeat_interleave(H // Hkv, dim=1)
    want_q, want_k = lsh_matmul(q, k_heads, rot.to(q.dtype), buckets)
    negated = buckets - rot.shape[-1]
    for got, want, x in ((qb, want_q, q), (kb, want_k, k_heads)):
        proj = torch.einsum("bhtd,hdc->bhtc", x.double(), rot.double())
        dirs = torch.cat([proj, -proj[..., :negated]], dim=-1)
        best = dirs.max(-1).values
        chosen = dirs.gather(-1, got.long().unsqueeze(-1)).squeeze(-1)
        assert bool((chosen >= best - 1e-4 * (1 + best.abs())).all()), "a bucket that is not the argmax"
        assert (got == want).float().mean().item() > 0.99


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
def test_lsh_kernel_rounds_the_draw_to_the_inputs_dtype(dtype):
    """Given the criterion's draw before its rounding (what an op's decide step passes), the
    Triton hashing kernel gives the buckets the rotation rounded to the inputs' dtype gives."""
    from tilesparse.backends.triton.hashing import hash_into
    from tilesparse.patterns.criteria import lsh_draw, lsh_rotation

    B, H, Hkv, D, T, buckets = 1, 32, 8, 128, 4096, 64
    g = torch.Generator(DEVICE).manual_seed(7)
    q = torch.randn(B, H, T, D, device=DEVICE, dtype=dtype, generator=g)
    k = torch.randn(B, Hkv, T, D, device=DEVICE, dtype=dtype, generator=g)
    draw = lsh_draw(H, D, buckets, DEVICE, torch.Generator(DEVICE).manual_seed(3))
    rounded = lsh_rotation(H, D, buckets, dtype, DEVICE, torch.Generator(DEVICE).manual_seed(3)).float()
    assert dtype == torch.float32 or not torch.equal(draw, rounded)
    got, want = ([torch.empty((B, H, T), dtype=torch.int32, device=DEVICE) for _ in range(2)] for _ in range(2))
    hash_into(q, k, draw, buckets, *got)
    hash_into(q, k, rounded, buckets, *want)
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_a_call_hashing_in_the_triton_builder_matches_the_chunked_reference(monkeypatch):
    """With CuPy's hashing refused (as on a machine without CuPy), a call that makes
    its own Hash decisions hashes in the Triton builder and equals the reference under the
    buckets ``attn.decide`` gives with the same generator (T = 16,384, GQA, D = 128)."""
    from tilesparse.backends.cupy import index as cupy_index

    monkeypatch.setattr(cupy_index, "hash_reasons", lambda *a: ["refused by the test"])
    T, (B, H, Hkv, D) = 16384, (1, 8, 2, 128)
    torch.manual_seed(1)
    q = torch.randn((B, H, T, D), device=DEVICE, dtype=torch.bfloat16).requires_grad_()
    k, v = (torch.randn((B, Hkv, T, D), device=DEVICE, dtype=torch.bfloat16).requires_grad_() for _ in range(2))
    attn = ts.compile(ts.Hash(buckets=16), causal=True, backend="triton")
    (a,) = attn.plan(q, k, v).assignments
    assert a.fused_hash and a.builder.NAME == "triton"
    out = attn(q, k, v, generator=torch.Generator(DEVICE).manual_seed(7))
    dec = attn.decide(q, k, generator=torch.Generator(DEVICE).manual_seed(7))
    _assert_matches_chunked_reference(attn, q, k, v, dec, out, "T=16384, hashed by the Triton builder")
