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
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.backends.triton.gluon_dkdv import GLUON_TRITON
from tilesparse.backends.triton.launch import normal_launches
from tilesparse.backends.triton.op import override_config, tile_config, ws_dkdv, ws_dkdv_reason
from tilesparse.backends.triton.versions import installed_triton
from tilesparse.testing import assert_equivalent

from builtin_specs import one_of_each_kind

DEVICE = torch.device("cuda")


@pytest.fixture(autouse=True)
def _hopper_and_a_checked_triton():
    if torch.cuda.get_device_capability() != (9, 0) or installed_triton() not in GLUON_TRITON:
        pytest.skip(f"the kernel runs on Hopper with a Triton in {sorted(GLUON_TRITON)} only")


SPECS = [
    *one_of_each_kind(keep=0.5, buckets=16, k=8, hybrid_buckets=8, perhead_buckets=4).values(),
    ts.QKDrop(keep=0.05),
    ts.Hash(buckets=3, attend_self=False),
    ts.Hash(buckets=1),
]
# gradients against the masked reference, relative to its largest magnitude (test_triton_gpu.py's)
TOL = {torch.float16: 5e-3, torch.bfloat16: 3e-2}
# against the Triton kernel: the same products in another order of the fp32 sums, then one rounding
SAME = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-6))


def _grads(attn, q, k, v, dec, go, **sdpa):
    return torch.autograd.grad(attn(q, k, v, decisions=dec, **sdpa), (q, k, v), go)


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


# one test per (dtype, D): pytest-xdist compiles their variants in parallel
SHARDS = [(dtype, D) for dtype in (torch.bfloat16, torch.float16) for D in (64, 128)]


@pytest.mark.parametrize("dtype,D", SHARDS, ids=[f"{str(d).removeprefix('torch.')}-D{D}" for d, D in SHARDS])
def test_gradients_match_the_triton_kernel_and_the_reference(dtype, D):
    @settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        spec=st.sampled_from(SPECS),
        causal=st.booleans(),
        T=st.one_of(st.integers(1, 200), st.integers(200, 3000)),
        extra_k=st.sampled_from([0, 0, 37]),
        heads=st.sampled_from([(2, 2), (4, 2), (8, 2), (3, 1)]),
        padded=st.booleans(),
        seed=st.integers(0, 2**31 - 1),
    )
    def check(spec, causal, T, extra_k, heads, padded, seed):
        _check_against_both(spec, causal, T, extra_k, heads, D, dtype, padded, seed)

    check()


def _check_against_both(spec, causal, T, extra_k, heads, D, dtype, padded, seed):
    H, Hkv = heads
    Tk = T + extra_k
    g = torch.Generator(DEVICE).manual_seed(seed)
    q = torch.randn((2, H, T, D), generator=g, device=DEVICE, dtype=dtype).requires_grad_()
    k, v = (torch.randn((2, Hkv, Tk, D), generator=g, device=DEVICE, dtype=dtype).requires_grad_() for _ in range(2))
    attn = ts.compile(spec, causal=causal, backend="triton")
    dec = attn.decide(q, k, generator=g)
    go = torch.randn((2, H, T, D), generator=g, device=DEVICE, dtype=dtype)
    sdpa = {}
    if padded:  # the second sequence's last keys are padding
        mask = torch.ones((2, Tk), dtype=torch.bool, device=DEVICE)
        mask[1, Tk - max(1, Tk // 3):] = False
        sdpa["key_padding_mask"] = mask
    with override_config(ws_dkdv=1):
        assert ws_dkdv(tile_config(D, dtype, DEVICE), q)
        ws = _grads(attn, q, k, v, dec, go, **sdpa)
        assert_equivalent(attn, q, k, v, decisions=dec, atol=TOL[dtype], **sdpa)
    with override_config(ws_dkdv=0):
        tri = _grads(attn, q, k, v, dec, go, **sdpa)
    assert torch.equal(ws[0], tri[0]), "dQ comes from the same kernel either way"
    for name, a, b in zip(("dk", "dv"), ws[1:], tri[1:], strict=True):
        assert torch.isfinite(a).all() == torch.isfinite(b).all(), name
        err = _rel_err(a, b)
        assert err <= SAME[dtype], f"{name} against the Triton kernel: {err:.2e}"


def test_lean_launch_is_the_normal_one_bit_for_bit():
    g = torch.Generator(DEVICE).manual_seed(3)
    for D, heads in ((64, (4, 4)), (128, (8, 2))):
        q = torch.randn((1, heads[0], 1500, D), generator=g, device=DEVICE, dtype=torch.bfloat16).requires_grad_()
        k, v = (torch.randn((1, heads[1], 1500, D), generator=g, device=DEVICE, dtype=torch.bfloat16).requires_grad_()
                for _ in range(2))  # fmt: skip
        go = torch.randn_like(q)
        for spec in (ts.QKDrop(keep=0.5), ts.Hash(buckets=8)):
            attn = ts.compile(spec, causal=True, backend="triton")
            dec = attn.decide(q, k, generator=g)
            with override_config(ws_dkdv=1):
                lean = [_grads(attn, q, k, v, dec, go) for _ in range(2)]  # the second call takes the lean path
                with normal_launches():
                    normal = _grads(attn, q, k, v, dec, go)
            for a, b in zip(lean[1], normal, strict=True):
                assert torch.equal(a, b), f"{spec} D={D}"


@pytest.mark.parametrize("where", ["q", "k", "v"])
def test_nonfinite_inputs_take_the_sanitizing_variant(where):
    g = torch.Generator(DEVICE).manual_seed(7)
    q = torch.randn((1, 4, 700, 128), generator=g, device=DEVICE, dtype=torch.bfloat16)
    k, v = (torch.randn((1, 2, 700, 128), generator=g, device=DEVICE, dtype=torch.bfloat16) for _ in range(2))
    bad = {"q": q, "k": k, "v": v}[where]
    bad[0, 0, 300, 5] = float("inf")
    bad[0, -1, 500, 9] = float("nan")
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    go = torch.randn_like(q)
    attn = ts.compile(ts.QKDrop(keep=0.6), causal=True, backend="triton")
    dec = attn.decide(q, k, generator=g)
    with override_config(ws_dkdv=1):
        ws = _grads(attn, q, k, v, dec, go)
    with override_config(ws_dkdv=0):
        tri = _grads(attn, q, k, v, dec, go)
    for name, a, b in zip(("dq", "dk", "dv"), ws, tri, strict=True):
        assert torch.equal(torch.isnan(a), torch.isnan(b)), f"{name}: NaN in other places"
        assert torch.equal(torch.isinf(a), torch.isinf(b)), f"{name}: inf in other places"
        fin = torch.isfinite(a)
        assert fin.any() and _rel_err(a[fin], b[fin]) <= SAME[torch.bfloat16], name
