"""The attention kernels' program order (``TileConfig.heavy_first``, kernels._scheduled): every
(block, batch-head) once, heads fastest and the longest blocks first, and outputs and gradients
bit for bit those of the grid's own order, for every built-in pattern."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

import tilesparse as ts
from tilesparse.backends.triton import kernels
from tilesparse.backends.triton.op import override_config

from builtin_specs import given_decisions, one_of_each_kind


@triton.jit
def _order(OUT, HEAVY_FIRST: tl.constexpr, LAST_FIRST: tl.constexpr):
    block, bh = kernels._scheduled(HEAVY_FIRST, LAST_FIRST)
    linear = tl.program_id(0) + tl.program_id(1) * tl.num_programs(0)  # the order the GPU starts them in
    tl.store(OUT + linear * 2, block)
    tl.store(OUT + linear * 2 + 1, bh)


@pytest.mark.parametrize("last_first", [True, False])
def test_each_program_once_heads_fastest_longest_first(last_first):
    n_blocks, n_bh = 5, 3
    got = torch.full((n_blocks * n_bh, 2), -1, dtype=torch.int32)
    _order[(n_blocks, n_bh)](got, True, last_first)
    blocks = range(n_blocks - 1, -1, -1) if last_first else range(n_blocks)
    assert got.tolist() == [[b, bh] for b in blocks for bh in range(n_bh)]
    _order[(n_blocks, n_bh)](got, False, last_first)  # off: the grid's own order, blocks fastest
    assert got.tolist() == [[b, bh] for bh in range(n_bh) for b in range(n_blocks)]


SPECS = one_of_each_kind(keep=0.6, buckets=3, k=4)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_longest_first_gives_the_grids_order_results(name, causal):
    """GQA (4 query heads, 2 kv heads), Tq < Tk, lengths no multiple of a block (32 here)."""
    g = torch.Generator().manual_seed(1)
    q = torch.randn((1, 4, 70, 16), generator=g, requires_grad=True)
    k, v = (torch.randn((1, 2, 100, 16), generator=g, requires_grad=True) for _ in range(2))
    go = torch.randn((1, 4, 70, 16), generator=g)
    attn = ts.compile(SPECS[name], causal=causal, backend="triton")
    dec = given_decisions(attn, q, k)
    got = {}
    for heavy_first in (0, 1):
        with override_config(heavy_first=heavy_first):
            out = attn(q, k, v, decisions=dec)
            got[heavy_first] = (out, *torch.autograd.grad(out, (q, k, v), go))
    for a, b in zip(got[0], got[1], strict=True):
        assert torch.equal(a, b), name
    want = attn.reference(q, k, v, decisions=dec)
    torch.testing.assert_close(got[1][0], want, atol=2e-5, rtol=2e-5)
