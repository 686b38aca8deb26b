"""The warp-specialized forward kernel (backends/triton/gluon_fwd.py) on the H200.

It runs for 16-bit inputs at D=128 on Hopper with the Triton it was written for, where
``TileConfig.ws_fwd`` turns it on. With it taken for every group (``override_config(ws_fwd=1)``):
its outputs and gradients (the backward reads its lse) against the Triton forward's (``ws_fwd=0``)
and the masked reference over random patterns, decisions, shapes, GQA, Tq < Tk and key padding;
long sequences; its lean launch against Triton's own, bit for bit; inputs holding an inf or NaN,
where the Triton kernel's sanitizing variant takes over (nonfinite.py); and explain()'s line.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import tilesparse as ts
from tilesparse.backends.triton.op import override_config, tile_config, ws_fwd, ws_fwd_reason
from tilesparse.testing import assert_equivalent

from gluon_cases import (
    CASES,
    DEVICE,
    SAME,
    TOL,
    assert_same_nonfinite,
    lean_and_normal,
    nonfinite_call,
    random_call,
    rel_err,
)

pytestmark = pytest.mark.usefixtures("gluon_runs_here")  # conftest.py: Hopper and a checked Triton

DTYPES = [torch.bfloat16, torch.float16]


def _out_and_grads(attn, q, k, v, dec, go, **sdpa):
    o = attn(q, k, v, decisions=dec, **sdpa)
    return (o.detach(), *torch.autograd.grad(o, (q, k, v), go))


def _assert_close(ws, tri, dtype, what=""):
    for name, a, b in zip(("o", "dq", "dk", "dv"), ws, tri, strict=True):
        assert torch.equal(torch.isfinite(a), torch.isfinite(b)), f"{what} {name}"
        err = rel_err(a, b)
        assert err <= SAME[dtype], f"{what} {name} against the Triton forward: {err:.2e}"


def test_explain_names_it_where_it_runs():
    q = torch.empty((1, 1, 1, 128), dtype=torch.bfloat16, device=DEVICE)
    attn = ts.compile(ts.QKDrop(keep=0.5), causal=True, backend="triton")
    cfg = tile_config(128, q.dtype, DEVICE)
    assert ws_fwd(cfg, q), ws_fwd_reason(q, cfg)  # on by default for a group without buckets
    assert "triton forward: the warp-specialized Gluon kernel" in attn.explain(q, q, q)
    with override_config(ws_fwd=0):
        assert "triton forward: the Triton kernel (the warp-specialized one does not run: off in" in attn.explain(q, q, q)
    for dtype, D, words in ((torch.float32, 128, "off in the tile configuration"),
                            (torch.bfloat16, 64, "off in the tile configuration")):  # fmt: skip
        x = torch.empty((1, 1, 1, D), dtype=dtype, device=DEVICE)
        c = tile_config(D, dtype, DEVICE)
        assert not ws_fwd(c, x) and words in ws_fwd_reason(x, c)
    with override_config(ws_fwd=1):
        x = torch.empty((1, 1, 1, 64), dtype=torch.bfloat16, device=DEVICE)
        assert "the kernel takes 128" in ws_fwd_reason(x, tile_config(64, x.dtype, DEVICE))


@pytest.mark.parametrize("dtype", DTYPES, ids=["bfloat16", "float16"])
def test_outputs_and_gradients_match_the_triton_kernel_and_the_reference(dtype):
    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
    @given(**CASES)
    def check(spec, causal, T, extra_k, heads, padded, seed):
        attn, q, k, v, dec, go, sdpa = random_call(spec, causal, T, extra_k, heads, 128, dtype, padded, seed)
        with override_config(ws_fwd=1):
            assert ws_fwd(tile_config(128, dtype, DEVICE), q)
            ws = _out_and_grads(attn, q, k, v, dec, go, **sdpa)
            assert_equivalent(attn, q, k, v, decisions=dec, atol=TOL[dtype], **sdpa)
        with override_config(ws_fwd=0):
            tri = _out_and_grads(attn, q, k, v, dec, go, **sdpa)
        _assert_close(ws, tri, dtype, f"{spec} causal={causal} T={T}+{extra_k} heads={heads} padded={padded}")

    check()


def test_long_sequences_match_the_triton_kernel():
    """Many key tiles per query block, GQA, both loop shapes (Hash: one loop; QKDrop: three)."""
    g = torch.Generator(DEVICE).manual_seed(11)
    q = torch.randn((1, 8, 16384, 128), generator=g, device=DEVICE, dtype=torch.bfloat16).requires_grad_()
    k, v = (torch.randn((1, 2, 16384, 128), generator=g, device=DEVICE, dtype=torch.bfloat16).requires_grad_()
            for _ in range(2))  # fmt: skip
    go = torch.randn_like(q)
    for spec in (ts.QKDrop(keep=0.7), ts.Hash(buckets=16), ts.Hash(buckets=64), ts.Dense()):
        attn = ts.compile(spec, causal=True, backend="triton")
        dec = attn.decide(q, k, generator=g) if spec.decision_fields else None
        with override_config(ws_fwd=1):
            ws = _out_and_grads(attn, q, k, v, dec, go)
        with override_config(ws_fwd=0):
            tri = _out_and_grads(attn, q, k, v, dec, go)
        assert all(torch.isfinite(t).all() for t in ws), spec
        _assert_close(ws, tri, torch.bfloat16, str(spec))


def test_lean_launch_is_the_normal_one_bit_for_bit():
    for label, lean, normal in lean_and_normal(dict(ws_fwd=1)):
        for a, b in zip(lean, normal, strict=True):
            assert torch.equal(a, b), label


@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_nonfinite_inputs_take_the_sanitizing_variant(where):
    attn, q, k, v, dec, go = nonfinite_call(where)
    with override_config(ws_fwd=1):
        o_ws = attn(q, k, v, decisions=dec)
        ws = torch.autograd.grad(o_ws, (q, k, v), go)
    with override_config(ws_fwd=0):
        o_tri = attn(q, k, v, decisions=dec)
        tri = torch.autograd.grad(o_tri, (q, k, v), go)
    assert torch.equal(torch.isnan(o_ws), torch.isnan(o_tri)) and torch.equal(torch.isinf(o_ws), torch.isinf(o_tri))
    assert_same_nonfinite(ws, tri)
