"""Shared by the tile executor's and the CuPy backend's CPU tests: an op over a spec lowered
with explicit block sizes, each head group run by :meth:`LoweredOp.attend_group` (the tile
executor unless a subclass says otherwise), with the interface ``assert_equivalent`` uses (call
with decisions, ``reference``, ``spec``); and a corruption of a prepared group that a correct
kernel must notice."""

from __future__ import annotations

import dataclasses

import torch

import tilesparse as ts
from tilesparse import ir
from tilesparse.backends.executor import tile_attention


class LoweredOp:
    """``spec`` lowered with (block_q, block_k); ``corrupt`` (optional) alters the prepared
    groups it is applied to (by :meth:`attend_group`) before they run."""

    def __init__(self, spec, *, causal, block_q, block_k, corrupt=None):
        self.spec = spec
        self.compiled = ts.compile(spec, causal=causal, backend="reference")
        self.program = ir.lower(spec, causal=causal, block_q=block_q, block_k=block_k)
        self.corrupt = corrupt

    def __repr__(self):
        return f"LoweredOp({self.spec}, blocks=({self.program.block_q}, {self.program.block_k}))"

    def attend_group(self, q, k, v, g: ir.PreparedGroup, scale: float) -> torch.Tensor:
        """(B, Hg, T, D): the group's heads, by the tile executor."""
        return tile_attention(q, k, v, self.corrupt(g) if self.corrupt else g, scale)

    def __call__(self, q, k, v, *, decisions):
        B, H, T, D = q.shape
        prepared = ir.prepare(self.program, decisions, batch=B, heads=H, seqlen=T, device=q.device)
        assert ir.verify(self.program, prepared) == [] or self.corrupt
        per_head = {}
        for g in prepared.groups:
            out = self.attend_group(q, k, v, g, D**-0.5)
            per_head.update({h: out[:, i] for i, h in enumerate(g.heads)})
        return torch.stack([per_head[h] for h in range(H)], dim=1)

    def reference(self, q, k, v, **kw):
        return self.compiled.reference(q, k, v, **kw)


def skip_first_kept_block(g: ir.PreparedGroup) -> ir.PreparedGroup:
    """``g`` with the first query block that has a non-empty range visiting nothing."""
    r = g.q_ranges.clone()
    used = (torch.arange(r.shape[3]) < g.q_nseg.unsqueeze(-1)) & (r[..., 3] > r[..., 0])
    b, h, m, _ = (int(i) for i in torch.nonzero(used)[0])
    r[b, h, m] = 0
    return dataclasses.replace(g, q_ranges=r)
