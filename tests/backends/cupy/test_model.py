"""The torch model of the CuPy kernels (``backends/cupy/model.py``) equals the reference:
outputs and the gradients of q, k and v over random TopKFeatures specs (alone, with Hash,
with QKDrop, under PerHead), decisions with edge cases (disjoint and shared supports, every
key dropped, isolated buckets), causal or not, grouped-query attention, T not a multiple of
the 64-row tiles, and every dtype. It drives the same autograd function as the kernels, so
the gather of q~ and k~, the scatter of their gradients and the dV reduction over grouped
heads are the ones the GPU runs. Also: the compressed keys are a per-tile CSC holding
exactly the tiles' kept entries; corrupt ranges make the comparison fail.

Property tests; CPU only, T <= 200 (the model loops over tiles in Python).
"""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse import ir
from tilesparse.backends.cupy.layout import BN
from tilesparse.backends.cupy.model import TorchModel
from tilesparse.testing import assert_equivalent, attention_inputs, decisions

from feature_ops import FeatureOp, topk_specs
from lowered_op import skip_first_kept_block


def ModelOp(spec, *, causal, corrupt=None):
    return FeatureOp(spec, causal=causal, make_impl=lambda D, dtype: TorchModel(D), corrupt=corrupt)


@settings(max_examples=40)
@given(data=st.data(), causal=st.booleans())
def test_the_kernel_model_equals_the_reference(data, causal):
    q, k, v = data.draw(attention_inputs(seqlen=st.integers(1, 200), head_dim=st.sampled_from([8, 16, 32, 64])))
    spec = data.draw(topk_specs(q.shape[1]))
    dec = data.draw(decisions(spec, q.shape))
    assert_equivalent(ModelOp(spec, causal=causal), q, k, v, decisions=dec)


@settings(max_examples=20)
@given(data=st.data())
def test_the_compressed_keys_are_a_per_tile_csc_of_the_kept_entries(data):
    q, k, _ = data.draw(attention_inputs(seqlen=st.integers(1, 150), head_dim=st.sampled_from([8, 32])))
    spec = ts.Hybrid(parts=[ts.Hash(buckets=3), ts.TopKFeatures(k=data.draw(st.integers(1, 8)))])
    dec = data.draw(decisions(spec, q.shape))
    B, H, T, D = q.shape
    g = ir.prepare(ir.lower(spec, causal=True, block_q=64, block_k=BN), dec, batch=B, heads=H, seqlen=T, device="cpu").groups[0]
    K = g.k_support.shape[-1]
    k_vals = torch.randn(B, H, T, K)
    ck = TorchModel(D).compress(g, g.k_support.to(torch.int16), k_vals)
    for bh in range(B * H):
        b, h = divmod(bh, H)
        for n in range(-(-T // BN)):
            rows = g.k_order[b, h, n * BN : (n + 1) * BN].long()
            ptr = ck.ptr[bh, n].long()
            assert ptr[0] == 0 and ptr[-1] == len(rows) * K and bool((ptr[1:] >= ptr[:-1]).all())
            got = set()
            for f in range(D):
                r = ck.row[bh, n, ptr[f] : ptr[f + 1]].long()
                assert bool((r[1:] > r[:-1]).all()), "a column lists its keys in layout order"
                for c, val in zip(r.tolist(), ck.val[bh, n, ptr[f] : ptr[f + 1]].tolist(), strict=True):
                    u = g.k_support[b, h, rows[c]].tolist().index(f)
                    assert val == k_vals[b, h, rows[c], u]
                    got.add((c, f))
            want = {(c, int(f)) for c in range(len(rows)) for f in g.k_support[b, h, rows[c]]}
            assert got == want


def test_the_model_reads_the_ranges_so_corrupt_ranges_fail():
    spec = ts.Hybrid(parts=[ts.Hash(buckets=2), ts.TopKFeatures(k=4)])
    q, k, v = (torch.randn(1, 1, 130, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
    dec = ts.compile(spec).decide(q, k, generator=torch.Generator().manual_seed(0))
    assert_equivalent(ModelOp(spec, causal=True), q, k, v, decisions=dec)
    with pytest.raises(AssertionError, match="out: max |error|"):
        assert_equivalent(ModelOp(spec, causal=True, corrupt=skip_first_kept_block), q, k, v, decisions=dec)
