"""The one-launch ``topk_abs`` kernel on the GPU at model sizes: exactly the criterion's torch
ops, and the path an op's own TopKFeatures decisions take on CUDA."""

from __future__ import annotations

import pytest
import torch

import tilesparse as ts

DEVICE = torch.device("cuda")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("D,n_keep", [(64, 8), (128, 8), (128, 64), (256, 32)])
def test_the_kernel_selects_as_the_criterion_at_model_sizes(D, n_keep, dtype):
    """B=1, H=32, Hkv=8, T=8,192 (keys longer: 8,200), values with ties (a few magnitudes) and
    NaN, infinities and signed zeros strewn in: the supports equal the torch ops', bit for bit."""
    from tilesparse.backends.triton.topk import topk_abs_into
    from tilesparse.patterns.criteria import topk_abs

    g = torch.Generator(DEVICE).manual_seed(D + n_keep)
    B, H, Hkv, Tq, Tk = 1, 32, 8, 8192, 8200
    q = torch.randint(-3, 4, (B, H, Tq, D), generator=g, device=DEVICE).to(dtype)
    k = torch.randn((B, Hkv, Tk, D), generator=g, device=DEVICE).to(dtype)
    for t in (q, k):
        flat = t.view(-1)
        at = torch.randint(0, flat.numel(), (4096,), generator=g, device=DEVICE)
        specials = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0], device=DEVICE, dtype=dtype)
        flat[at] = specials[torch.randint(0, 4, (4096,), generator=g, device=DEVICE)]
    q_support = torch.empty((B, H, Tq, n_keep), dtype=torch.int32, device=DEVICE)
    k_support = torch.empty((B, H, Tk, n_keep), dtype=torch.int32, device=DEVICE)
    topk_abs_into(q, k, n_keep, q_support, k_support)
    want_q, want_k = topk_abs(q, k.repeat_interleave(H // Hkv, dim=1), k=n_keep)
    assert torch.equal(q_support, want_q)
    assert torch.equal(k_support, want_k)


def test_an_op_decides_through_the_kernel_on_cuda():
    """An op's own TopKFeatures decisions on CUDA come from the kernel (one launch) and equal
    the criterion's torch ops."""
    from tilesparse.backends import topk_selector
    from tilesparse.backends.triton.topk import topk_abs_into
    from tilesparse.ir import check_inputs
    from tilesparse.patterns.criteria import topk_abs

    g = torch.Generator(DEVICE).manual_seed(0)
    q = torch.randn((1, 8, 1024, 128), generator=g, device=DEVICE, dtype=torch.bfloat16)
    k = torch.randn((1, 2, 1024, 128), generator=g, device=DEVICE, dtype=torch.bfloat16)
    assert topk_selector(check_inputs(q, k, k, scale=None)) is topk_abs_into
    dec = ts.compile(ts.TopKFeatures(k=8), causal=True).decide(q, k)
    want = topk_abs(q, k.repeat_interleave(4, dim=1), k=8)
    assert torch.equal(dec.q_support, want[0]) and torch.equal(dec.k_support, want[1])
