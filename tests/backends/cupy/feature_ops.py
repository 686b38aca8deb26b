"""Shared by the CuPy backend's CPU tests: an op that runs TopKFeatures groups through a given
implementation of the kernels (the torch model, or the CUDA kernels in the emulator) and the
other groups through the tile executor, and the specs those tests draw."""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import tilesparse as ts
from tilesparse import ir
from tilesparse.backends.cupy.layout import BM, BN
from tilesparse.backends.cupy.op import feature_attention
from tilesparse.backends.executor import tile_attention


class FeatureOp:
    """The interface ``assert_equivalent`` uses (call with decisions, ``reference``, ``spec``);
    ``make_impl(head_dim, dtype)`` builds the kernels' implementation, ``corrupt`` (optional)
    alters a TopKFeatures group's prepared tensors first."""

    def __init__(self, spec, *, causal, make_impl, corrupt=None):
        self.spec = spec
        self.compiled = ts.compile(spec, causal=causal, backend="reference")
        self.program = ir.lower(spec, causal=causal, block_q=BM, block_k=BN)
        self.make_impl = make_impl
        self.corrupt = corrupt

    def __repr__(self):
        return f"FeatureOp({self.spec}, {self.make_impl.__name__})"

    def __call__(self, q, k, v, *, decisions):
        B, H, T, D = q.shape
        prepared = ir.prepare(self.program, decisions, batch=B, heads=H, seqlen=T, device=q.device)
        per_head = {}
        for g in prepared.groups:
            if isinstance(g.group.score, ir.FeatureDotScore):
                g = self.corrupt(g) if self.corrupt else g
                out = feature_attention(q, k, v, g, D**-0.5, impl=self.make_impl(D, q.dtype)).to(q.dtype)
            else:
                out = tile_attention(q, k, v, g, D**-0.5)
            per_head.update({h: out[:, i] for i, h in enumerate(g.heads)})
        return torch.stack([per_head[h] for h in range(H)], dim=1)

    def reference(self, q, k, v, **kw):
        return self.compiled.reference(q, k, v, **kw)


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
