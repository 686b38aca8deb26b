"""The tile executor: a torch model of the kernels, run tile by tile on any device.

It reads the prepared index tensors exactly as the Triton kernels do: for each query block it
walks the segments' tile intervals (:func:`tilesparse.ir.tile_intervals`), evaluates the
in-tile predicates only on partial tiles, and keeps SCFA's NaN-safe online softmax (a row with
no kept key ends with l = 0 and outputs zeros, its log-sum-exp is +inf so the backward pass
gives it zero gradient). The backward pass is FlashAttention-2's: a dK/dV sweep over key blocks
and their query-row ranges, and a dQ sweep over query blocks. Slow (Python loops over tiles),
exact, and the specification kernels are held to.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..ir import AttentionInputs, DotScore, PreparedGroup, element_mask, tile_intervals
from .base import Backend, register
from .first_order import first_order_only
from .kept_product import kept_product
from .reference import feature_mask

__all__ = ["ExecutorBackend", "tile_attention"]


class ExecutorBackend(Backend):
    """Tile-by-tile torch execution of the prepared program (the kernels' executable model)."""

    NAME = "executor"

    def blocks(self, inputs: AttentionInputs) -> tuple[int, int]:
        return 64, 64

    def attend(self, g: PreparedGroup, inputs: AttentionInputs) -> Tensor:
        return tile_attention(inputs.q, inputs.k, inputs.v, g, inputs.scale)


def tile_attention(q: Tensor, k: Tensor, v: Tensor, g: PreparedGroup, scale: float) -> Tensor:
    """(B, Hg, Tq, D) attention of group ``g``'s heads over k, v (B, Hkv, Tk, D), differentiable
    w.r.t. q, k, v."""
    return _TileAttention.apply(q, k, v, g, scale)


class _Walk:
    """Per-(b, head) views shared by the forward and backward sweeps."""

    def __init__(self, g: PreparedGroup, q: Tensor, k: Tensor, b: int, hg: int):
        self.h = g.heads[hg]
        self.hk = self.h // (q.shape[1] // k.shape[1])
        self.q_order, self.k_order = g.q_order[b, hg].long(), g.k_order[b, hg].long()
        self.q_pos, self.k_pos = g.q_pos[b, hg], g.k_pos[b, hg]
        self.q_bucket, self.k_bucket = g.q_bucket[b, hg], g.k_bucket[b, hg]
        self.fq = self.fk = None
        if not isinstance(g.group.score, DotScore):
            D = q.shape[-1]
            self.fq = feature_mask(g.q_support[b, hg], D, torch.float32)
            self.fk = feature_mask(g.k_support[b, hg], D, torch.float32)
        self.predicates = g.group.predicates

    def mask(self, rows: Tensor, cols: Tensor) -> Tensor:
        return element_mask(
            self.predicates,
            self.q_pos[rows, None],
            self.k_pos[None, cols],
            self.q_bucket[rows, None],
            self.k_bucket[None, cols],
        )

    def tiles(self, ranges: Tensor, nseg: Tensor, block: int, width: int, n_rows: int, n_cols: int):
        """Yield (block index, rows, [(cols, masked), ...]) in visiting order; ``n_rows`` rows
        on this side, ``n_cols`` on the other."""
        iv = tile_intervals(ranges, nseg, width).tolist()
        for m in range(ranges.shape[0]):
            rows = torch.arange(m * block, min(n_rows, (m + 1) * block), device=ranges.device)
            tiles = []
            for lo, f0, f1, hi in iv[m][: int(nseg[m])]:
                for n in range(lo, hi):
                    cols = torch.arange(n * width, min(n_cols, (n + 1) * width), device=ranges.device)
                    tiles.append((cols, not f0 <= n < f1))
            yield m, rows, tiles


class _TileAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, g: PreparedGroup, scale: float):
        B, _, T, D = q.shape
        Tk = k.shape[2]
        Hg = len(g.heads)
        out = torch.zeros((B, Hg, T, D), dtype=torch.float32, device=q.device)
        lse = torch.empty((B, Hg, T), dtype=torch.float32, device=q.device)
        for b in range(B):
            for hg in range(Hg):
                w = _Walk(g, q, k, b, hg)
                Q = _sparsify(q[b, w.h].float(), w.fq)
                K = _sparsify(k[b, w.hk].float(), w.fk)
                V = v[b, w.hk].float()
                for _, rows, tiles in w.tiles(g.q_ranges[b, hg], g.q_nseg[b, hg], g.block_q, g.block_k, T, Tk):
                    qr = Q[w.q_order[rows]]
                    m_i = torch.full((len(rows),), float("-inf"), device=q.device)
                    l_i = torch.zeros(len(rows), device=q.device)
                    acc = torch.zeros((len(rows), D), device=q.device)
                    for cols, masked in tiles:
                        s = qr @ K[w.k_order[cols]].T * scale
                        Vc = V[w.k_order[cols]]
                        keep = None
                        if masked:
                            keep = w.mask(rows, cols)
                            s = torch.where(keep, s, float("-inf"))
                        m_new = torch.maximum(m_i, s.amax(dim=1))
                        m_safe = torch.where(torch.isinf(m_new), 0.0, m_new)  # SCFA's NaN guard
                        p = torch.exp(s - m_safe[:, None])
                        alpha = torch.exp(m_i - m_safe)
                        l_i = l_i * alpha + p.sum(dim=1)
                        acc = acc * alpha[:, None] + kept_product(p, Vc, keep)
                        m_i = m_new
                    empty = l_i == 0
                    out[b, hg, w.q_order[rows]] = acc / torch.where(empty, 1.0, l_i)[:, None]
                    lse[b, hg, rows] = torch.where(empty, float("inf"), m_i + torch.log(l_i))
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.g, ctx.scale = g, scale
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        g, scale = ctx.g, ctx.scale
        B, _, T, D = q.shape
        Tk = k.shape[2]
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        dk = torch.zeros(k.shape, dtype=torch.float32, device=q.device)
        dv = torch.zeros(v.shape, dtype=torch.float32, device=q.device)
        dout = dout.float()
        delta = (dout * out).sum(-1)  # (B, Hg, T) original order
        for b in range(B):
            for hg in range(len(g.heads)):
                w = _Walk(g, q, k, b, hg)
                Q = _sparsify(q[b, w.h].float(), w.fq)
                K = _sparsify(k[b, w.hk].float(), w.fk)
                V = v[b, w.hk].float()
                dO, Di, L = dout[b, hg], delta[b, hg], lse[b, hg]
                # dK, dV: key blocks against their query-row ranges
                dK = torch.zeros((Tk, D), device=q.device)
                dV = torch.zeros((Tk, D), device=q.device)
                for _, cols, tiles in w.tiles(g.k_ranges[b, hg], g.k_nseg[b, hg], g.block_k, g.block_q, Tk, T):
                    kc, vc = K[w.k_order[cols]], V[w.k_order[cols]]
                    dk_acc = torch.zeros((len(cols), D), device=q.device)
                    dv_acc = torch.zeros((len(cols), D), device=q.device)
                    for rows, masked in tiles:
                        p, ds, qo, keep = _probs(w, Q, kc, vc, dO, Di, L, rows, cols, masked, scale)
                        keep_t = None if keep is None else keep.T
                        dv_acc += kept_product(p.T, dO[qo], keep_t)
                        dk_acc += kept_product(ds.T, Q[qo], keep_t) * scale
                    dK[w.k_order[cols]] += dk_acc
                    dV[w.k_order[cols]] += dv_acc
                dk[b, w.hk] += _sparsify(dK, w.fk)
                dv[b, w.hk] += dV
                # dQ: query blocks against their key-row ranges
                dQ = torch.zeros((T, D), device=q.device)
                for _, rows, tiles in w.tiles(g.q_ranges[b, hg], g.q_nseg[b, hg], g.block_q, g.block_k, T, Tk):
                    dq_acc = torch.zeros((len(rows), D), device=q.device)
                    for cols, masked in tiles:
                        kc, vc = K[w.k_order[cols]], V[w.k_order[cols]]
                        _, ds, _, keep = _probs(w, Q, kc, vc, dO, Di, L, rows, cols, masked, scale)
                        dq_acc += kept_product(ds, kc, keep) * scale
                    dQ[w.q_order[rows]] = dq_acc
                dq[b, w.h] += _sparsify(dQ, w.fq)
        grads = first_order_only("executor", (dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)), (q, k, v))
        return (*grads, None, None)


def _probs(w: _Walk, Q, kc, vc, dO, Di, L, rows, cols, masked, scale):
    """(p, ds, query original rows, keep or None) of one tile: p = exp(s - lse),
    ds = p * (dO v^T - delta), both exactly 0 off the mask of a masked tile."""
    qo = w.q_order[rows]
    p = torch.exp(Q[qo] @ kc.T * scale - L[rows, None])
    if masked:
        keep = w.mask(rows, cols)
        p = torch.where(keep, p, 0.0)
        ds = torch.where(keep, p * (dO[qo] @ vc.T - Di[qo, None]), 0.0)
        return p, ds, qo, keep
    ds = p * (dO[qo] @ vc.T - Di[qo, None])
    return p, ds, qo, None



def _sparsify(x: Tensor, features: Tensor | None) -> Tensor:
    return x if features is None else x * features


register(ExecutorBackend())
