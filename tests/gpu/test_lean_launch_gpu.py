"""The lean launch path gives bitwise the results of Triton's normal ``kernel[grid]`` path,
forward and backward, index build included, for every built-in pattern (GPU only)."""

from __future__ import annotations

import contextlib

import pytest
import torch
import triton

import tilesparse as ts
from tilesparse.backends.triton import index, kernels
from tilesparse.backends.triton.launch import keyed_launches, lean, lean_supported, normal_launches

from builtin_specs import given_decisions, one_of_each_kind

DEVICE = torch.device("cuda")

SPECS = {**one_of_each_kind(keep=0.5, buckets=16, k=8, perhead_buckets=4), "hash64": ts.Hash(buckets=64)}
KERNELS = (kernels._attn_fwd, kernels._attn_bwd_dq, kernels._attn_bwd_dkdv, index._sort_keys, index._build_sides)


def _run(attn, q, k, v, dec, go):
    out = attn(q, k, v, decisions=dec)
    grads = torch.autograd.grad(out, (q, k, v), go)
    return (out, *grads)


@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("shape", [(2, 4, 4, 64, 1000), (1, 8, 2, 128, 777)], ids=["mha-d64", "gqa-d128"])
@pytest.mark.parametrize("causal", [True, False])
def test_lean_path_is_bitwise_the_normal_path(name, shape, causal):
    """On a Triton the lean path supports it launches and matches the normal path bitwise; on
    any other it stays off (every launch takes the normal path, the results are the same)."""
    B, H, Hkv, D, T = shape
    attn = ts.compile(SPECS[name], causal=causal, backend="triton")
    gen = torch.Generator(device=DEVICE).manual_seed(0)
    hits = sum(lean(f).hits for f in KERNELS)
    for step in range(3):  # the first lean call of a new key compiles through the normal path
        q = torch.randn((B, H, T, D), device=DEVICE, dtype=torch.bfloat16, generator=gen, requires_grad=True)
        k, v = (torch.randn((B, Hkv, T, D), device=DEVICE, dtype=torch.bfloat16, generator=gen, requires_grad=True)
                for _ in range(2))  # fmt: skip
        go = torch.randn_like(q)
        dec = attn.decide(q, k)
        with normal_launches():
            want = _run(attn, q, k, v, dec, go)
        got = _run(attn, q, k, v, dec, go)
        for w, g, what in zip(want, got, ("out", "dq", "dk", "dv"), strict=True):
            assert torch.equal(w, g), f"{name} step {step}: {what} differs between the lean and the normal path"
    launched = sum(lean(f).hits for f in KERNELS) > hits
    if lean_supported():
        assert launched, "the lean path never launched"
    else:
        assert not launched, f"the lean path launched on Triton {triton.__version__}, which it does not support"


@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("shape", [(1, 4, 4, 64, 1000), (1, 8, 2, 128, 777)], ids=["mha-d64", "gqa-d128"])
@pytest.mark.parametrize("decisions", ["made", "given", "trusted"])
def test_launch_sites_are_bitwise_the_keyed_launches(name, shape, decisions):
    """Launches from their sites (launch.Site) against every launch keyed by all its arguments
    (keyed_launches): bitwise, forward and backward, decisions made in the call (the hashing
    and top-k launches), given and checked on the device (a poison among the forward's
    scalars) or trusted; three calls, so that the sites' entries are hit."""
    B, H, Hkv, D, T = shape
    attn = ts.compile(SPECS[name], causal=True, backend="triton")
    gen = torch.Generator(device=DEVICE).manual_seed(1)
    for step in range(3):
        q = torch.randn((B, H, T, D), device=DEVICE, dtype=torch.bfloat16, generator=gen, requires_grad=True)
        k, v = (torch.randn((B, Hkv, T, D), device=DEVICE, dtype=torch.bfloat16, generator=gen, requires_grad=True)
                for _ in range(2))  # fmt: skip
        go = torch.randn_like(q)
        dec = {"made": None, "given": given_decisions(attn, q, k), "trusted": attn.decide(q, k)}[decisions]
        results = []
        for keyed in (True, False):
            seeded = torch.Generator(device=DEVICE).manual_seed(step) if dec is None else None
            with keyed_launches() if keyed else contextlib.nullcontext():
                out = attn(q, k, v, decisions=dec, generator=seeded)
                results.append((out, *torch.autograd.grad(out, (q, k, v), go)))
        for w, g, what in zip(*results, ("out", "dq", "dk", "dv"), strict=True):
            assert torch.equal(w, g), f"{name} {decisions} step {step}: {what} differs between sites and keyed launches"
