"""The backward's one-launch sum of per-query-head dK and dV into the kv heads (backends/triton/
gqa.py) against torch's sum over each kv head's query heads, under the interpreter: every head
in order (told so: the unrolled path that reads no head map; or not told) or a group of some
heads in any order, k and v with different kv head counts, sizes
that are not a multiple of the kernel's tile, and each output dtype; exactly (bf16: within the interpreter's
truncating cast), as the kernel adds in the head map's order in fp32."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tilesparse.backends.triton.gqa import _BLOCK, sum_into_kv_heads


def _expected(per_head: torch.Tensor, heads: list[int], n_heads: int, like: torch.Tensor) -> torch.Tensor:
    """The sum in fp32, in the head map's order (the kernel's)."""
    out = torch.zeros(like.shape, dtype=torch.float32)
    group = n_heads // like.shape[1]
    for row, h in enumerate(heads):
        out[:, h // group] += per_head[:, row]
    return out


@settings(max_examples=25, deadline=None)
@given(
    B=st.integers(1, 2),
    heads_k=st.sampled_from([1, 2, 4]),
    v_fewer=st.booleans(),
    group=st.sampled_from([1, 2, 4]),
    T=st.integers(1, 40),
    D=st.sampled_from([3, 16, 64, 100]),
    dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
    data=st.data(),
)
def test_the_kernel_sums_each_kv_heads_query_heads(B, heads_k, v_fewer, group, T, D, dtype, data):
    n_heads = heads_k * group
    heads_v = 1 if v_fewer else heads_k
    # every head in order, told so or not, or some heads in any order (a PerHead group)
    in_order = data.draw(st.booleans())
    if in_order:
        heads = list(range(n_heads))
    else:
        heads = data.draw(st.permutations(range(n_heads)).flatmap(lambda p: st.integers(1, n_heads).map(lambda n: p[:n])))
    g = torch.Generator().manual_seed(data.draw(st.integers(0, 2**16)))
    dk, dv = (torch.randn((B, len(heads), T, D), generator=g) for _ in range(2))
    k = torch.empty((B, heads_k, T, D), dtype=dtype)
    v = torch.empty((B, heads_v, T, D), dtype=dtype)
    out_k, out_v = sum_into_kv_heads(dk, dv, torch.tensor(heads, dtype=torch.int32), n_heads, k, v, in_order=in_order)
    for out, per_head, like in ((out_k, dk, k), (out_v, dv, v)):
        assert out.shape == like.shape and out.dtype == dtype and out.is_contiguous()
        want = _expected(per_head, list(heads), n_heads, like)
        if dtype == torch.bfloat16:  # the interpreter's fp32 -> bf16 cast truncates: within one ulp (2^-7)
            torch.testing.assert_close(out.float(), want, rtol=2**-7, atol=0)
        else:
            torch.testing.assert_close(out, want.to(dtype), rtol=0, atol=0)


@pytest.mark.parametrize("in_order", [False, True])
def test_a_kv_head_spans_several_tiles(in_order):
    """T x D past two of the kernel's tiles, so programs along axis 0 each take their part."""
    T, D = 2 * _BLOCK // 16 + 5, 16
    dk, dv = (torch.arange(2 * T * D, dtype=torch.float32).view(1, 2, T, D) + s for s in (0.0, 0.5))
    k = torch.empty((1, 1, T, D))
    out_k, out_v = sum_into_kv_heads(dk, dv, torch.tensor([0, 1], dtype=torch.int32), 2, k, k, in_order=in_order)
    torch.testing.assert_close(out_k, dk.sum(1, keepdim=True))
    torch.testing.assert_close(out_v, dv.sum(1, keepdim=True))


@pytest.mark.parametrize(
    "case,match",
    [
        ("shape", "do not fit"),
        ("dtype", "contiguous float32"),
        ("heads", "do not divide"),
        ("in_order", "in_order needs a gradient per query head"),
    ],
)
def test_bad_arguments_are_named(case, match):
    dk = torch.zeros((1, 2, 4, 8))
    k = torch.empty((1, 1, 4, 8), dtype=torch.bfloat16)
    head_map, n_heads, in_order = torch.tensor([0, 1], dtype=torch.int32), 2, False
    if case == "in_order":  # two gradients for four query heads, yet told they are every head in order
        n_heads, in_order = 4, True
    elif case == "shape":
        k = torch.empty((1, 1, 5, 8), dtype=torch.bfloat16)
    elif case == "dtype":
        dk = dk.half()
    else:
        n_heads, k = 3, torch.empty((1, 2, 4, 8), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=match):
        sum_into_kv_heads(dk, dk, head_map, n_heads, k, k, in_order=in_order)
