"""The tile executor equals the reference: outputs and the gradients of q, k and v, over random
specs, decisions and shapes (T from 1 to a few hundred, not a multiple of the block too),
grouped-query attention, and float32, float16, bfloat16 inputs (the executor does float32
math, so bfloat16 needs no interpreter workaround on CPU). Run twice: directly, on programs lowered with small blocks
(16, 32) through ``prepare`` and ``tile_attention``; and through ``ts.compile(backend="executor")``
(64 x 64 blocks). A range corrupted to skip a kept tile must make the comparison fail.

Property tests; CPU only, T <= 160 with 16-row blocks and <= 300 otherwise (the executor loops
over tiles in Python).
"""

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse.testing import assert_equivalent, attention_inputs, decisions, specs

from lowered_op import LoweredOp, skip_first_kept_block


@settings(max_examples=60)
@given(
    data=st.data(),
    causal=st.booleans(),
    block_q=st.sampled_from([16, 32]),
    block_k=st.sampled_from([16, 32]),
)
def test_tile_executor_with_small_blocks_equals_the_reference(data, causal, block_q, block_k):
    top = 160 if min(block_q, block_k) == 16 else 300
    q, k, v = data.draw(attention_inputs(batch=st.integers(1, 2), heads=st.integers(1, 4), seqlen=st.integers(1, top)))
    spec = data.draw(specs(heads=q.shape[1], max_k=q.shape[-1]))
    dec = data.draw(decisions(spec, q.shape))
    assert_equivalent(LoweredOp(spec, causal=causal, block_q=block_q, block_k=block_k), q, k, v, decisions=dec)


@settings(max_examples=60)
@given(data=st.data(), causal=st.booleans())
def test_compiled_executor_equals_the_reference(data, causal):
    q, k, v = data.draw(attention_inputs(seqlen=st.integers(1, 300)))
    spec = data.draw(specs(heads=q.shape[1], max_k=q.shape[-1]))
    dec = data.draw(decisions(spec, q.shape))
    attn = ts.compile(spec, causal=causal, backend="executor")
    assert_equivalent(attn, q, k, v, decisions=dec)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize(
    "spec",
    [ts.Hash(buckets=4), ts.Hybrid(parts=[ts.QKDrop(keep=0.6), ts.Hash(buckets=3, attend_self=False)]),
     ts.PerHead(dense_heads=[1], rest=ts.TopKFeatures(k=8))],
    ids=str,
)  # fmt: skip
def test_executor_with_criteria_decisions_gqa_and_every_dtype(spec, dtype):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 130, 32, generator=g).to(dtype)
    k, v = (torch.randn(2, 2, 130, 32, generator=g).to(dtype) for _ in range(2))
    attn = ts.compile(spec, backend="executor")
    errors = assert_equivalent(attn, q, k, v)  # decisions drawn by the spec's criteria
    assert set(errors) == {"out", "grad q", "grad k", "grad v"}
    out = attn(q, k, v, decisions=attn.decide(q, k, generator=torch.Generator().manual_seed(0)))
    assert out.dtype == dtype and out.shape == q.shape


def _claim_every_tile_full(g):
    """``g`` whose every used segment visits all rows without the mask."""
    T = g.seqlen
    used = (torch.arange(g.q_ranges.shape[3]) < g.q_nseg.unsqueeze(-1)).unsqueeze(-1)
    return dataclasses.replace(g, q_ranges=torch.where(used, torch.tensor([0, 0, T, T], dtype=torch.int32), g.q_ranges))


@pytest.mark.parametrize("corrupt", [skip_first_kept_block, _claim_every_tile_full])
def test_the_executor_reads_the_ranges_so_corrupt_ranges_fail(corrupt):
    spec = ts.Hybrid(parts=[ts.Hash(buckets=3), ts.QKDrop(keep=0.8)])
    q, k, v = (torch.randn(1, 1, 96, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
    dec = ts.compile(spec).decide(q, k, generator=torch.Generator().manual_seed(0))
    assert_equivalent(LoweredOp(spec, causal=True, block_q=32, block_k=32), q, k, v, decisions=dec)
    with pytest.raises(AssertionError, match="out: max |error|"):
        assert_equivalent(LoweredOp(spec, causal=True, block_q=32, block_k=32, corrupt=corrupt), q, k, v, decisions=dec)
