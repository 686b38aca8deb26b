"""Shared by the CuPy backend's CPU tests: an op that runs TopKFeatures groups through a given
implementation of the kernels (the torch model, or the CUDA kernels in the emulator) and the
other groups through the tile executor, and the specs those tests draw."""

from __future__ import annotations

from hypothesis import strategies as st

import tilesparse as ts
from tilesparse import ir
from tilesparse.backends.cupy.layout import BM, BN
from tilesparse.backends.cupy.op import feature_attention
from tilesparse.backends.executor import tile_attention

from lowered_op import LoweredOp


class FeatureOp(LoweredOp):
    """TopKFeatures groups through ``make_impl(head_dim, dtype)``, the kernels' implementation,
    after ``corrupt`` (optional); the other groups through the tile executor, uncorrupted."""

    def __init__(self, spec, *, causal, make_impl, corrupt=None):
        super().__init__(spec, causal=causal, block_q=BM, block_k=BN, corrupt=corrupt)
        self.make_impl = make_impl

    def __repr__(self):
        return f"FeatureOp({self.spec}, {self.make_impl.__name__})"

    def attend_group(self, q, k, v, g, scale):
        if not isinstance(g.group.score, ir.FeatureDotScore):
            return tile_attention(q, k, v, g, scale)
        g = self.corrupt(g) if self.corrupt else g
        return feature_attention(q, k, v, g, scale, impl=self.make_impl(q.shape[-1], q.dtype)).to(q.dtype)


def topk_specs(heads: int, max_k: int = 8):
    """TopKFeatures alone, with Hash (attend_self either way), with QKDrop, with both, and
    under PerHead with some of ``heads`` dense."""
    top = st.builds(ts.TopKFeatures, k=st.integers(1, max_k))
    part = st.sampled_from([ts.Hash(buckets=3), ts.Hash(buckets=2, attend_self=False), ts.QKDrop(keep=0.5), ts.Hash(buckets=1)])
    hybrid = st.builds(lambda p, t: ts.Hybrid(parts=[p, t]), part, top)
    three = top.map(lambda t: ts.Hybrid(parts=[ts.QKDrop(keep=0.7), ts.Hash(buckets=4), t]))
    base = st.one_of(top, hybrid, three)
    per_head = st.builds(ts.PerHead, dense_heads=st.lists(st.integers(0, heads - 1), unique=True, max_size=heads - 1), rest=base)
    return st.one_of(base, per_head)
