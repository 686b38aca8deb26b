"""The warp-specialized dK/dV kernel (backends/triton/gluon_dkdv.py) on the H200.

It runs for 16-bit inputs at D=64 and 128 on Hopper with the Triton it was written for, where
``TileConfig.ws_dkdv`` turns it on (the 16-bit configurations at D=64 and 128 do). That the
backend takes it on this machine by default and explain() says so, and names the configuration
where it is off; then, with it taken for every group (``override_config(ws_dkdv=1)``): its
gradients against the Triton kernel's (``ws_dkdv=0``) and the masked reference over random
patterns, decisions, shapes, GQA, Tq < Tk and key padding; its lean launch against Triton's own,
bit for bit; and inputs holding an inf or NaN, where the Triton kernel's sanitizing variant takes
over (nonfinite.py).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings

import tilesparse as ts
from tilesparse.backends.triton.op import override_config, tile_config, ws_dkdv, ws_dkdv_reason
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


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("D", [64, 128])
def test_the_backend_takes_it_here(dtype, D):
    q = torch.empty((1, 1, 1, D), dtype=dtype, device=DEVICE)
    attn = ts.compile(ts.QKDrop(keep=0.5), causal=True, backend="triton")
    cfg = tile_config(D, dtype, DEVICE)
    assert ws_dkdv(cfg, q), ws_dkdv_reason(q, cfg)
    assert "warp-specialized Gluon kernel" in attn.explain(q, q, q)
    with override_config(ws_dkdv=0):
        assert "the Triton kernel (the warp-specialized one does not run: off in" in attn.explain(q, q, q)


def test_elsewhere_the_reason_is_named():
    with override_config(ws_dkdv=1):
        for dtype, D, words in ((torch.float32, 64, "the kernel takes fp16 and bf16"),
                                (torch.bfloat16, 256, "the kernel takes 64 and 128")):  # fmt: skip
            q = torch.empty((1, 1, 1, D), dtype=dtype, device=DEVICE)
            cfg = tile_config(D, dtype, DEVICE)
            assert not ws_dkdv(cfg, q) and words in ws_dkdv_reason(q, cfg)


@pytest.mark.parametrize("dtype,D", SHARDS, ids=SHARD_IDS)
def test_gradients_match_the_triton_kernel_and_the_reference(dtype, D):
    @settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
    @given(**CASES)
    def check(spec, causal, T, extra_k, heads, padded, seed):
        _check_against_both(spec, causal, T, extra_k, heads, D, dtype, padded, seed)

    check()


def _check_against_both(spec, causal, T, extra_k, heads, D, dtype, padded, seed):
    attn, q, k, v, dec, go, sdpa = random_call(spec, causal, T, extra_k, heads, D, dtype, padded, seed)
    with override_config(ws_dkdv=1):
        assert ws_dkdv(tile_config(D, dtype, DEVICE), q)
        ws = grads(attn, q, k, v, dec, go, **sdpa)
        assert_equivalent(attn, q, k, v, decisions=dec, atol=TOL[dtype], **sdpa)
    with override_config(ws_dkdv=0):
        tri = grads(attn, q, k, v, dec, go, **sdpa)
    assert torch.equal(ws[0], tri[0]), "dQ comes from the same kernel either way"
    for name, a, b in zip(("dk", "dv"), ws[1:], tri[1:], strict=True):
        assert torch.isfinite(a).all() == torch.isfinite(b).all(), name
        err = rel_err(a, b)
        assert err <= SAME[dtype], f"{name} against the Triton kernel: {err:.2e}"


def test_lean_launch_is_the_normal_one_bit_for_bit():
    for label, lean, normal in lean_and_normal(dict(ws_dkdv=1)):
        for a, b in zip(lean, normal, strict=True):
            assert torch.equal(a, b), label


@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_nonfinite_inputs_take_the_sanitizing_variant(where):
    attn, q, k, v, dec, go = nonfinite_call(where)
    with override_config(ws_dkdv=1):
        ws = grads(attn, q, k, v, dec, go)
    with override_config(ws_dkdv=0):
        tri = grads(attn, q, k, v, dec, go)
    assert_same_nonfinite(ws, tri)
