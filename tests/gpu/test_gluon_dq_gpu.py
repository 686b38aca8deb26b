"""The warp-specialized dQ kernel (backends/triton/gluon_dq.py) on the H200.

It runs for 16-bit inputs at D=64 and 128 on Hopper with the Triton it was written for, where
``TileConfig.ws_dq`` turns it on. With it taken for every group (``override_config(ws_dq=1)``):
its gradients against the Triton dQ kernel's (``ws_dq=0``; delta, which it computes too, feeds
dK and dV) and the masked reference over random patterns, decisions, shapes, GQA, Tq < Tk and key
padding; its lean launch against Triton's own, bit for bit; inputs holding an inf or NaN, where
the Triton kernel's sanitizing variant takes over (nonfinite.py); and explain()'s line.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import tilesparse as ts
from tilesparse.backends.triton.op import override_config, tile_config, ws_dq, ws_dq_reason
from tilesparse.testing import assert_equivalent

from gluon_cases import (
    CASES,
    DEVICE,
    SAME,
    SHARD_IDS,
    SHARDS,
    TOL,
    assert_same_nonfinite,
    grads,
    lean_and_normal,
    nonfinite_call,
    random_call,
    rel_err,
)


pytestmark = pytest.mark.usefixtures("gluon_runs_here")  # conftest.py: Hopper and a checked Triton


def test_explain_names_it_where_it_runs():
    q = torch.empty((1, 1, 1, 128), dtype=torch.bfloat16, device=DEVICE)
    attn = ts.compile(ts.QKDrop(keep=0.5), causal=True, backend="triton")
    with override_config(ws_dq=1):
        assert ws_dq(tile_config(128, q.dtype, DEVICE), q), ws_dq_reason(q, tile_config(128, q.dtype, DEVICE))
        assert "triton dQ: the warp-specialized Gluon kernel" in attn.explain(q, q, q)
    with override_config(ws_dq=0):
        assert "triton dQ: the Triton kernel (the warp-specialized one does not run: off in" in attn.explain(q, q, q)
    with override_config(ws_dq=1):
        for dtype, D, words in ((torch.float32, 64, "the kernel takes fp16 and bf16"),
                                (torch.bfloat16, 256, "the kernel takes 64 and 128")):  # fmt: skip
            x = torch.empty((1, 1, 1, D), dtype=dtype, device=DEVICE)
            cfg = tile_config(D, dtype, DEVICE)
            assert not ws_dq(cfg, x) and words in ws_dq_reason(x, cfg)


@pytest.mark.parametrize("dtype,D", SHARDS, ids=SHARD_IDS)
def test_gradients_match_the_triton_kernel_and_the_reference(dtype, D):
    @settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
    @given(**CASES)
    def check(spec, causal, T, extra_k, heads, padded, seed):
        _check_against_both(spec, causal, T, extra_k, heads, D, dtype, padded, seed)

    check()


def _check_against_both(spec, causal, T, extra_k, heads, D, dtype, padded, seed):
    attn, q, k, v, dec, go, sdpa = random_call(spec, causal, T, extra_k, heads, D, dtype, padded, seed)
    with override_config(ws_dq=1):
        assert ws_dq(tile_config(D, dtype, DEVICE), q)
        ws = grads(attn, q, k, v, dec, go, **sdpa)
        assert_equivalent(attn, q, k, v, decisions=dec, atol=TOL[dtype], **sdpa)
    with override_config(ws_dq=0):
        tri = grads(attn, q, k, v, dec, go, **sdpa)
    for name, a, b in zip(("dq", "dk", "dv"), ws, tri, strict=True):
        assert torch.equal(torch.isfinite(a), torch.isfinite(b)), name
        err = rel_err(a, b)
        assert err <= SAME[dtype], f"{name} against the Triton kernel: {err:.2e}"


def test_long_sequences_match_the_triton_kernel():
    """Many key tiles per query block, GQA, D=128, both loop shapes (Hash: one loop; QKDrop: three)."""
    g = torch.Generator(DEVICE).manual_seed(11)
    q = torch.randn((1, 8, 16384, 128), generator=g, device=DEVICE, dtype=torch.bfloat16).requires_grad_()
    k, v = (torch.randn((1, 2, 16384, 128), generator=g, device=DEVICE, dtype=torch.bfloat16).requires_grad_()
            for _ in range(2))  # fmt: skip
    go = torch.randn_like(q)
    for spec in (ts.QKDrop(keep=0.7), ts.Hash(buckets=16), ts.Hash(buckets=64)):
        attn = ts.compile(spec, causal=True, backend="triton")
        dec = attn.decide(q, k, generator=g)
        with override_config(ws_dq=1):
            ws = grads(attn, q, k, v, dec, go)
        with override_config(ws_dq=0):
            tri = grads(attn, q, k, v, dec, go)
        for name, a, b in zip(("dq", "dk", "dv"), ws, tri, strict=True):
            assert torch.isfinite(a).all(), f"{spec} {name}"
            err = rel_err(a, b)
            assert err <= SAME[torch.bfloat16], f"{spec} {name} against the Triton kernel: {err:.2e}"


def test_lean_launch_is_the_normal_one_bit_for_bit():
    for label, lean, normal in lean_and_normal(dict(ws_dq=1)):
        for a, b in zip(lean, normal, strict=True):
            assert torch.equal(a, b), label


@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_nonfinite_inputs_take_the_sanitizing_variant(where):
    attn, q, k, v, dec, go = nonfinite_call(where)
    with override_config(ws_dq=1):
        ws = grads(attn, q, k, v, dec, go)
    with override_config(ws_dq=0):
        tri = grads(attn, q, k, v, dec, go)
    assert_same_nonfinite(ws, tri)
