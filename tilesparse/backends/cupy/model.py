"""A torch model of the CUDA kernels in ``kernels/sfa.cu``: the same data structures (query
supports CSR-like, keys compressed per tile into a CSC), the same tile walk over the IR's row
ranges with the same arithmetic, the same log2 online softmax with SCFA's NaN guard, the
same outputs (out at original positions, lse per layout row, dq~ and dk~ per kept entry, dV
per query head). Loops run over (b, head), blocks and tiles in Python; inside a tile the math
is vectorized. It runs on any device: CI checks it against the reference on the CPU, the GPU
tests check the kernels against the reference, so a bug in the kernels' shared design shows
up on the CPU first.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ...ir import KEY_SENTINEL, PreparedGroup, keep_element
from .layout import BM, BN, P_CAUSAL, P_NOT_SELF, P_SAME_BUCKET, P_STRICT, CompressedKeys

__all__ = ["TorchModel"]

LOG2E = 1.4426950408889634


def _keep(qp: Tensor, qb: Tensor, kp: Tensor, kb: Tensor, flags: int) -> Tensor:
    """``keep_element`` of sfa.cu over broadcast (rows x cols) positions and buckets: the IR's
    predicates from the kernel's flag bits."""
    return keep_element(
        qp, kp, qb, kb, causal=bool(flags & P_CAUSAL), strict=bool(flags & P_STRICT),
        same_bucket=bool(flags & P_SAME_BUCKET), not_self=bool(flags & P_NOT_SELF),
    )  # fmt: skip


def _segment_tiles(rng: Tensor, nseg: int, width: int):
    """``segment_tiles`` of sfa.cu: yield (tile, masked) for a block's segments in order."""
    prev_hi = 0
    for s in range(nseg):
        lo_r, flo_r, fhi_r, hi_r = (int(x) for x in rng[s])
        lo = max(lo_r // width, prev_hi)
        hi = max(-(-hi_r // width), lo)
        f0 = min(max(-(-flo_r // width), lo), hi)
        f1 = min(max(fhi_r // width, f0), hi)
        prev_hi = max(prev_hi, hi)
        for n in range(lo, hi):
            yield n, not f0 <= n < f1


class TorchModel:
    """The kernels' algorithm in torch; same entry points as :class:`~.op.CudaKernels`."""

    def __init__(self, head_dim: int):
        self.head_dim = head_dim

    def compress(self, g: PreparedGroup, k_ids: Tensor, k_vals: Tensor) -> CompressedKeys:
        """``sfa_compress_keys``: per key tile, the (feature, key row) sorted CSC."""
        B, Hg, T, K = k_ids.shape
        D = self.head_dim
        nt = -(-T // BN)
        ptr = torch.zeros((B * Hg, nt, D + 1), dtype=torch.int16, device=k_ids.device)
        row = torch.zeros((B * Hg, nt, BN * K), dtype=torch.int16, device=k_ids.device)
        val = torch.zeros((B * Hg, nt, BN * K), dtype=k_vals.dtype, device=k_ids.device)
        ids, vals, order = k_ids.flatten(0, 1), k_vals.flatten(0, 1), g.k_order.flatten(0, 1).long()
        for bh in range(B * Hg):
            for n in range(nt):
                rows = order[bh, n * BN : (n + 1) * BN]
                f = ids[bh, rows].flatten().long()
                # counting sort by feature: entries of a column stay in key-row order
                srt = torch.sort(f, stable=True).indices
                counts = torch.bincount(f, minlength=D)
                ptr[bh, n, 1:] = counts.cumsum(0).to(torch.int16)
                nnz = f.numel()
                row[bh, n, :nnz] = (srt // K).to(torch.int16)
                val[bh, n, :nnz] = vals[bh, rows].flatten()[srt]
        return CompressedKeys(ptr, row, val)


    @staticmethod
    def _dense_tile(ck: CompressedKeys, bh: int, n: int, rows: int, D: int, K: int) -> Tensor:
        """(D, BN) float: the tile's keys, feature-major, zeros where a key keeps no feature."""
        ptr = ck.ptr[bh, n].long()
        nnz = rows * K
        feat = torch.repeat_interleave(torch.arange(D, device=ptr.device), ptr[1:] - ptr[:-1])
        kd = torch.zeros((D, BN), dtype=torch.float32, device=ptr.device)
        kd[feat, ck.row[bh, n, :nnz].long()] = ck.val[bh, n, :nnz].float()
        return kd

    @staticmethod
    def _scores(q_id: Tensor, q_val: Tensor, kd: Tensor) -> Tensor:
        """``overlap_scores``: (BM, BN) sum over a query's kept features of its value times
        the column of that feature (feature by feature, as the kernel adds them)."""
        s = torch.zeros((q_id.shape[0], kd.shape[1]), dtype=torch.float32, device=kd.device)
        for u in range(q_id.shape[1]):
            s += q_val[:, u, None] * kd[q_id[:, u].long()]
        return s

    def _query_rows(self, g, q_ids, q_vals, bh, r0, T):
        r = torch.arange(r0, r0 + BM, device=q_ids.device)
        ok = r < T
        rc = r.clamp_max(T - 1)
        qo = g.q_order.flatten(0, 1)[bh, rc].long()
        q_id = torch.where(ok[:, None], q_ids.flatten(0, 1)[bh, qo].long(), 0)
        q_val = torch.where(ok[:, None], q_vals.flatten(0, 1)[bh, qo].float(), 0.0)
        qp = torch.where(ok, g.q_pos.flatten(0, 1)[bh, rc], -1)
        qb = torch.where(ok, g.q_bucket.flatten(0, 1)[bh, rc], -1)
        return ok, qo, q_id, q_val, qp, qb

    def _key_rows(self, g, v, bh, n, T, heads_g, group):
        c = torch.arange(n * BN, n * BN + BN, device=v.device)
        ok = c < T
        cc = c.clamp_max(T - 1)
        ko = g.k_order.flatten(0, 1)[bh, cc].long()
        kp = torch.where(ok, g.k_pos.flatten(0, 1)[bh, cc], KEY_SENTINEL)
        kb = torch.where(ok, g.k_bucket.flatten(0, 1)[bh, cc], -3)
        b, hg = divmod(bh, heads_g)
        hkv = int(g.heads[hg]) // group
        vt = torch.where(ok[:, None], v[b, hkv, ko].float(), 0.0)
        return ok, ko, kp, kb, vt

    def forward(self, g: PreparedGroup, q_ids, q_vals, ck: CompressedKeys, v, scale: float, group: int, flags: int):
        """``sfa_fwd``: (out (B, Hg, T, D) float at original positions, lse (B, Hg, T) log2
        units per layout row, +inf for a row with no kept key)."""
        B, Hg, T, K = q_ids.shape
        D = self.head_dim
        out = torch.zeros((B * Hg, T, D), dtype=torch.float32, device=v.device)
        lse = torch.zeros((B * Hg, T), dtype=torch.float32, device=v.device)
        qk_scale = scale * LOG2E
        ranges, nseg = g.q_ranges.flatten(0, 1).cpu(), g.q_nseg.flatten(0, 1).cpu()
        for bh in range(B * Hg):
            for m in range(ranges.shape[1]):
                ok, qo, q_id, q_val, qp, qb = self._query_rows(g, q_ids, q_vals, bh, m * BM, T)
                m_i = torch.full((BM,), -math.inf, device=v.device)
                l_i = torch.zeros(BM, device=v.device)
                acc = torch.zeros((BM, D), device=v.device)
                for n, masked in _segment_tiles(ranges[bh, m], int(nseg[bh, m]), BN):
                    k_ok, _, kp, kb, vt = self._key_rows(g, v, bh, n, T, Hg, group)
                    kd = self._dense_tile(ck, bh, n, int(k_ok.sum()), D, K)
                    keep = ok[:, None] & k_ok[None, :]
                    if masked:
                        keep = keep & _keep(qp[:, None], qb[:, None], kp[None, :], kb[None, :], flags)
                    s = torch.where(keep, self._scores(q_id, q_val, kd) * qk_scale, -math.inf)
                    m_new = torch.maximum(m_i, s.amax(1))
                    m_safe = torch.where(m_new == -math.inf, 0.0, m_new)
                    alpha = torch.exp2(m_i - m_safe)
                    p = torch.exp2(s - m_safe[:, None])
                    l_i = l_i * alpha + p.sum(1)
                    m_i = m_new
                    acc = acc * alpha[:, None] + p @ vt
                empty = l_i == 0
                inv = torch.where(empty, 0.0, 1.0 / torch.where(empty, 1.0, l_i))
                out[bh, qo[ok]] = (acc * inv[:, None])[ok]
                lse[bh, m * BM : m * BM + int(ok.sum())] = torch.where(empty, math.inf, m_i + torch.log2(l_i))[ok]
        return out.view(B, Hg, T, D), lse.view(B, Hg, T)

    def backward(self, g: PreparedGroup, q_ids, q_vals, k_ids, ck: CompressedKeys, v, dout, lse, delta,
                 scale: float, group: int, flags: int):  # fmt: skip
        """``sfa_bwd_dq`` and ``sfa_bwd_dkdv``: (dq~ (B, Hg, T, k), dk~ (B, Hg, T, k), dV per
        query head (B, Hg, T, D)), all float, at original positions."""
        B, Hg, T, K = q_ids.shape
        D = self.head_dim
        dev = v.device
        qk_scale = scale * LOG2E
        dq = torch.zeros((B * Hg, T, K), device=dev)
        dk = torch.zeros((B * Hg, T, K), device=dev)
        dv = torch.zeros((B * Hg, T, D), device=dev)
        dO, L, Di = dout.flatten(0, 1).float(), lse.flatten(0, 1), delta.flatten(0, 1)
        kids = k_ids.flatten(0, 1)

        def tile(bh, m, n, masked):
            ok, qo, q_id, q_val, qp, qb = self._query_rows(g, q_ids, q_vals, bh, m * BM, T)
            k_ok, ko, kp, kb, vt = self._key_rows(g, v, bh, n, T, Hg, group)
            kd = self._dense_tile(ck, bh, n, int(k_ok.sum()), D, K)
            keep = ok[:, None] & k_ok[None, :]
            if masked:
                keep = keep & _keep(qp[:, None], qb[:, None], kp[None, :], kb[None, :], flags)
            lse_i = torch.where(ok, L[bh, (torch.arange(m * BM, m * BM + BM, device=dev)).clamp_max(T - 1)], math.inf)
            p = torch.where(keep, torch.exp2(self._scores(q_id, q_val, kd) * qk_scale - lse_i[:, None]), 0.0)
            do = torch.where(ok[:, None], dO[bh, qo], 0.0)
            ds = p * (do @ vt.T - torch.where(ok, Di[bh, qo], 0.0)[:, None])
            return ok, qo, q_id, q_val, kd, k_ok, ko, p, do, ds

        # dQ~: query blocks against their key tiles
        qr, qn = g.q_ranges.flatten(0, 1).cpu(), g.q_nseg.flatten(0, 1).cpu()
        for bh in range(B * Hg):
            for m in range(qr.shape[1]):
                acc = torch.zeros((BM, K), device=dev)
                ok = qo = None
                for n, masked in _segment_tiles(qr[bh, m], int(qn[bh, m]), BN):
                    ok, qo, q_id, _, kd, *_, ds = tile(bh, m, n, masked)
                    for u in range(K):
                        acc[:, u] += (ds * kd[q_id[:, u]]).sum(1)
                if ok is not None:
                    dq[bh, qo[ok]] = acc[ok] * scale
        # dK~, dV: key blocks against their query tiles
        kr, kn = g.k_ranges.flatten(0, 1).cpu(), g.k_nseg.flatten(0, 1).cpu()
        for bh in range(B * Hg):
            for n in range(kr.shape[1]):
                dk_d = torch.zeros((D, BN), device=dev)
                dv_acc = torch.zeros((BN, D), device=dev)
                for m, masked in _segment_tiles(kr[bh, n], int(kn[bh, n]), BM):
                    _, _, q_id, q_val, kd, _, _, p, do, ds = tile(bh, m, n, masked)
                    qd = torch.zeros((BM, D), device=dev).scatter_(1, q_id, q_val)
                    dk_d += qd.T @ ds
                    dv_acc += p.T @ do
                k_ok = torch.arange(n * BN, n * BN + BN, device=dev) < T
                ko = g.k_order.flatten(0, 1)[bh, n * BN : n * BN + BN].long()
                dv[bh, ko] = dv_acc[k_ok]
                entry = self._entry_mask(ck, bh, n, int(k_ok.sum()), D, K)
                dk_d = dk_d * entry  # only the tile's kept entries (its CSC)
                dk[bh, ko] = torch.gather(dk_d.T[: len(ko)], 1, kids[bh, ko].long()) * scale
        return dq.view(B, Hg, T, K), dk.view(B, Hg, T, K), dv.view(B, Hg, T, D)

    @staticmethod
    def _entry_mask(ck: CompressedKeys, bh: int, n: int, rows: int, D: int, K: int) -> Tensor:
        """(D, BN) float: 1 where the tile's CSC holds an entry (a kept key feature)."""
        ptr = ck.ptr[bh, n].long()
        feat = torch.repeat_interleave(torch.arange(D, device=ptr.device), ptr[1:] - ptr[:-1])
        e = torch.zeros((D, BN), device=ptr.device)
        e[feat, ck.row[bh, n, : rows * K].long()] = 1.0
        return e
