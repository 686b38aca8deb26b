"""A Python model of ``kernels/index.cu`` (histogram, stable counting-sort scatter, block
ranges): program by program, warp by warp, lane arithmetic as written in the kernels, on any
device. CI checks it against :func:`tilesparse.ir.prepare_group`; the GPU tests check the
kernels the same way. Slow (loops over programs and warps): for T of a few hundred.
"""

from __future__ import annotations

import torch

from ...ir import HeadGroup, Keep, PreparedGroup, Program, SameBucket
from ...ir.prepare import _select, assemble_group
from .index import CHUNK, NT
from .layout import P_CAUSAL, P_NOT_SELF, P_STRICT, predicate_bits

__all__ = ["build_group_model"]


def _bins(bucket, keep, n_buckets, T):
    """``token_bin``: a kept token's bucket, the last bin for a dropped one."""
    b = bucket if bucket is not None else torch.zeros(T, dtype=torch.int64)
    return torch.where(keep, b, n_buckets) if keep is not None else b


def _scatter(bins: torch.Tensor, T: int, n_buckets: int, big: int, sentinel: int, dropped: int, chunk_size: int, nt: int):
    """``bucket_histogram`` + ``bucket_scatter`` for one (side, b * Hg) row of tokens."""
    n_bins = n_buckets + 1
    n_chunks = -(-T // chunk_size)
    counts = torch.stack([torch.bincount(bins[c * chunk_size : (c + 1) * chunk_size], minlength=n_bins) for c in range(n_chunks)])
    order, pos, bkt, skey = (torch.empty(T, dtype=torch.int64) for _ in range(4))
    for chunk in range(n_chunks):
        total = counts.sum(0)
        before = counts[:chunk].sum(0)
        off = (torch.cumsum(total, 0) - total) + before  # thread 0's exclusive scan
        for t0 in range(chunk * chunk_size, min(T, (chunk + 1) * chunk_size), nt):
            for w in range(nt // 32):
                lanes = torch.arange(t0 + 32 * w, t0 + 32 * w + 32)
                lanes = lanes[lanes < T]
                if not len(lanes):
                    continue
                b = bins[lanes]
                # rank among the warp's lower lanes with the same bin (__match_any_sync + popc)
                rank = torch.tensor([int((b[:i] == b[i]).sum()) for i in range(len(b))])
                row = off[b] + rank
                kept = b < n_buckets
                order[row] = lanes
                pos[row] = torch.where(kept, lanes, sentinel)
                bkt[row] = torch.where(kept, b, dropped)
                skey[row] = torch.where(kept, b * T + lanes, big)
                off = off + torch.bincount(b, minlength=n_bins)
    return order, pos, bkt, skey


def _bound(other: torch.Tensor, target: int, right: bool) -> int:
    return int(torch.searchsorted(other, torch.tensor([target]), right=right)[0])


def _block_ranges(mine, other, T, block, max_seg, big, flags, query_side):
    """``block_ranges`` for every block of one side: (ranges (nb, S, 4), nseg (nb,))."""
    nb = -(-T // block)
    ranges = torch.zeros((nb, max_seg, 4), dtype=torch.int64)
    nseg = torch.zeros(nb, dtype=torch.int64)
    causal, strict, not_self = bool(flags & P_CAUSAL), bool(flags & P_STRICT), bool(flags & P_NOT_SELF)
    for blk in range(nb):
        lanes = list(range(block))
        rows = [blk * block + lane for lane in lanes]
        key = [int(mine[r]) if r < T else big for r in rows]
        valid = [x < big for x in key]
        bucket = [x // T if v else -1 for x, v in zip(key, valid, strict=True)]
        starts, ends = [], []
        for lane in lanes:
            r = rows[lane]
            prev_key = int(mine[r - 1]) if (r < T and lane > 0) else big
            prev_bucket = prev_key // T if prev_key < big else -1
            starts.append(valid[lane] and bucket[lane] != prev_bucket)
            next_in = r < T and lane + 1 < block and r + 1 < T
            next_key = int(mine[r + 1]) if next_in else big
            ends.append(valid[lane] and (next_key >= big or next_key // T != bucket[lane]))
        seg = [sum(starts[: lane + 1]) - 1 for lane in lanes]
        n = sum(starts)
        nseg[blk] = n
        uniform = n == 1 and sum(valid) == block
        for lane in lanes:
            if not (starts[lane] or ends[lane]):
                continue
            slot = ranges[blk, seg[lane]]
            base, p = bucket[lane] * T, key[lane] % T
            if not causal:
                if starts[lane]:
                    lo, hi = _bound(other, base, False), _bound(other, base + T, False)
                    slot[:] = torch.tensor([lo, lo, (lo if not_self else hi) if uniform else lo, hi])
            elif query_side:
                if starts[lane]:
                    lo = _bound(other, base, False)
                    fhi = _bound(other, base + p, not strict)
                    slot[0], slot[1], slot[2] = lo, lo, max(fhi, lo) if uniform else lo
                if ends[lane]:
                    slot[3] = _bound(other, base + p, not strict)
            else:
                if starts[lane]:
                    lo, hi = _bound(other, base + p, strict), _bound(other, base + T, False)
                    slot[0] = lo
                    if not uniform:
                        slot[1] = lo
                    slot[2], slot[3] = (hi if uniform else lo), hi
                if ends[lane] and uniform:
                    slot[1] = _bound(other, base + p, strict)
    return ranges, nseg


def build_group_model(program: Program, group: HeadGroup, heads: tuple[int, ...], dec, *, batch: int,
                      n_heads: int, seqlen: int, device, chunk_size: int = CHUNK, nt: int = NT) -> PreparedGroup:  # fmt: skip
    """What :func:`tilesparse.backends.cupy.index.build_group` computes (buckets from ``dec``);
    ``chunk_size`` and ``nt`` (tokens per program, threads per program) default to the kernels'."""
    B, T, Hg = batch, seqlen, len(heads)
    has_bucket, has_keep = group.has(SameBucket), group.has(Keep)
    n_buckets = group.buckets if has_bucket else 1
    big = (n_buckets + 1) * T
    sel = lambda t: _select(t, heads, n_heads).reshape(B * Hg, T).cpu()  # noqa: E731
    sides = []
    for s, (sentinel, dropped) in enumerate(((-1, -1), (1 << 30, -2))):
        bucket = sel((dec.q_bucket, dec.k_bucket)[s]).long() if has_bucket else None
        keep = sel((dec.q_keep, dec.k_keep)[s]).bool() if has_keep else None
        rows = [_scatter(_bins(None if bucket is None else bucket[bh], None if keep is None else keep[bh], n_buckets, T),
                         T, n_buckets, big, sentinel, dropped, chunk_size, nt) for bh in range(B * Hg)]  # fmt: skip
        sides.append([torch.stack([r[i] for r in rows]) for i in range(4)])
    flags = predicate_bits(group)
    out = []
    for s, block in enumerate((program.block_q, program.block_k)):
        S = max(1, min(block, group.buckets))
        per = [_block_ranges(sides[s][3][bh], sides[1 - s][3][bh], T, block, S, big, flags, s == 0) for bh in range(B * Hg)]
        ranges = torch.stack([p[0] for p in per]).view(B, Hg, -1, S, 4)
        nseg = torch.stack([p[1] for p in per]).view(B, Hg, -1)
        order, pos, bkt, _ = (t.view(B, Hg, T) for t in sides[s])
        out.append(tuple(t.to(device=device, dtype=torch.int32).contiguous() for t in (order, pos, bkt, ranges, nseg)))
    return assemble_group(program, group, heads, dec, n_heads, T, device, out[0], out[1])
