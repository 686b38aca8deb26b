"""A Python model of ``kernels/index.cu``: ``index_count`` (every chunk's histogram of bins; the
LSH hashing is not modelled, the buckets come from ``dec``) and ``index_scatter`` (the stable
counting sort with warp-ordered ranks, and every block's ranges from the two sides' bin offsets
and histograms, the causal bounds queued and answered a warp each). Program by program, warp by
warp, lane arithmetic as written in the kernels, on any device; ``chunk_size`` and ``nt`` shrink
the programs so that small T spans several chunks and warps. Outputs start unset (the launcher's
``torch.empty``), so a slot the kernels would leave unwritten shows. CI checks the model against
:func:`tilesparse.ir.prepare_group`; the GPU tests check the kernels the same way. Slow (Python
loops over tokens): for T of a few hundred.
"""

from __future__ import annotations

from itertools import accumulate

import torch

from ...ir import HeadGroup, Keep, PreparedGroup, Program, SameBucket, max_segments
from ...ir import DROPPED_K_BUCKET, DROPPED_Q_BUCKET, KEY_SENTINEL, QUERY_SENTINEL
from ...ir.prepare import assemble_group, select_heads
from .index import CHUNK, NT
from .layout import P_CAUSAL, P_NOT_SELF, P_STRICT, predicate_bits

__all__ = ["build_group_model"]

UNSET = -12345  # what torch.empty leaves, as far as the model knows
Q_START_U, Q_END, K_START, K_START_U, K_END_U = range(5)  # what a causal bound fills in (index.cu)


def token_bin(bucket: torch.Tensor, keep: torch.Tensor | None, n_buckets: int) -> list[int]:
    """Every token's bin: a kept token's bucket, the last bin for a dropped one."""
    return (torch.where(keep, bucket, n_buckets) if keep is not None else bucket).tolist()


def index_count(bins: list[int], n_bins: int, chunk_size: int) -> list[list[int]]:
    """``index_count`` for one (side, b * Hg): every chunk's histogram of bins (chunks, n_bins)."""
    counts = []
    for t0 in range(0, len(bins), chunk_size):
        hist = [0] * n_bins
        for b in bins[t0 : t0 + chunk_size]:
            hist[b] += 1
        counts.append(hist)
    return counts


def bin_of(start: list[int], n_bins: int, row: int) -> int:
    """The bin holding sorted row ``row``: the last i with start[i] <= row (binary search)."""
    lo, hi = 0, n_bins
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        lo, hi = (mid, hi) if start[mid] <= row else (lo, mid)
    return lo


def index_scatter(side: int, chunk: int, bins, o_bins, cnt, o_cnt, out, *, n_buckets: int, block: int, max_seg: int,
                  flags: int, chunk_size: int, nt: int) -> None:  # fmt: skip
    """One program of ``index_scatter``: chunk ``chunk`` of one (side, b * Hg) row of tokens, whose
    bins and histograms are ``bins``, ``cnt`` (the other side's ``o_bins``, ``o_cnt``); writes into
    ``out`` = (order, pos, bkt, ranges (blocks, max_seg, 4), nseg), nested lists."""
    order, pos, bkt, ranges, nsegs = out
    T, n_bins, n_chunks = len(bins), n_buckets + 1, len(cnt)
    causal, strict, not_self = bool(flags & P_CAUSAL), bool(flags & P_STRICT), bool(flags & P_NOT_SELF)
    # per bin: my total, my count in earlier chunks, the other side's total; thread 0's exclusive scans
    total = [sum(cnt[c][i] for c in range(n_chunks)) for i in range(n_bins)]
    start = [0, *accumulate(total)]  # s_start
    run = [start[i] + sum(cnt[c][i] for c in range(chunk)) for i in range(n_bins)]  # s_run
    o_start = [0, *accumulate(sum(o_cnt[c][i] for c in range(n_chunks)) for i in range(n_bins))]  # s_other
    nonempty = [0, *accumulate(int(x > 0 and i < n_buckets) for i, x in enumerate(total))]  # s_nonempty
    sentinel, dropped = (QUERY_SENTINEL, DROPPED_Q_BUCKET) if side == 0 else (KEY_SENTINEL, DROPPED_K_BUCKET)
    kept = start[n_buckets]  # rows past it are dropped
    # passes of nt tokens; with chunk_size % nt != 0 the last one runs past the chunk and rewrites
    # the next chunk's rows with the same values (its running offsets are where that chunk starts)
    for t0 in range(chunk * chunk_size, min(T, (chunk + 1) * chunk_size), nt):
        ts = [t0 + tid for tid in range(nt)]
        bin_ = [bins[t] if t < T else -1 for t in ts]
        row = [-1] * nt
        for w in range(nt // 32):  # warps in token order
            lanes = range(32 * w, 32 * w + 32)
            peers = {tid: [u for u in lanes if bin_[u] == bin_[tid]] for tid in lanes}  # __match_any_sync
            rank = {tid: sum(u < tid for u in peers[tid]) for tid in lanes}  # __popc of the lower peers
            for tid in lanes:
                if ts[tid] < T:
                    row[tid] = run[bin_[tid]] + rank[tid]
            for tid in lanes:  # the leaders bump their bins' running offsets
                if ts[tid] < T and rank[tid] == 0:
                    run[bin_[tid]] += len(peers[tid])
        queue = []  # (slot, bin, upto, what): s_queue
        for tid, t in enumerate(ts):
            if t >= T:
                continue
            b, r = bin_[tid], row[tid]
            is_kept = b < n_buckets
            order[r], pos[r], bkt[r] = t, t if is_kept else sentinel, b if is_kept else dropped
            blk = r // block
            first = blk * block
            last = min(first + block, kept) - 1  # the block's last kept row
            b0 = bin_of(start, n_bins, first) if first < kept else 0
            nseg = nonempty[bin_of(start, n_bins, last)] - nonempty[b0] + 1 if first < kept else 0
            uniform = nseg == 1 and last - first + 1 == block
            rng = ranges[blk]
            if r == first:  # the block's segment count, its unused slots zero
                nsegs[blk] = nseg
                for s in range(nseg, max_seg):
                    rng[s][:] = [0, 0, 0, 0]
            is_start = is_kept and (r == first or r == start[b])
            is_end = is_kept and (r == first + block - 1 or r == start[b + 1] - 1)
            slot = rng[nonempty[b] - nonempty[b0] if is_kept else 0]
            lo, hi = (o_start[b], o_start[b + 1]) if is_kept else (0, 0)
            if not causal:
                if is_start:
                    slot[:] = [lo, lo, (lo if not_self else hi) if uniform else lo, hi]
            elif side == 0:  # keys of the bucket before upto
                upto = t if strict else t + 1
                if is_start:
                    slot[0] = slot[1] = lo
                    if uniform:
                        queue.append((slot, b, upto, Q_START_U))
                    else:
                        slot[2] = lo
                if is_end:
                    queue.append((slot, b, upto, Q_END))
            else:  # queries of the bucket from upto on
                upto = t + 1 if strict else t
                if is_start:
                    slot[3] = hi
                    if uniform:
                        slot[2] = hi
                    queue.append((slot, b, upto, K_START_U if uniform else K_START))
                if is_end and uniform:
                    queue.append((slot, b, upto, K_END_U))
        for slot, b, upto, what in queue:  # a warp each: earlier chunks' histograms + the rest, lane-strided
            full = upto // chunk_size
            n = sum(
                sum(o_cnt[c][b] for c in range(lane, full, 32))
                + sum(o_bins[u] == b for u in range(full * chunk_size + lane, upto, 32))
                for lane in range(32)
            )  # the lanes' partial counts, shuffle-reduced
            v = o_start[b] + n
            if what == Q_START_U:
                slot[2] = v
            elif what == Q_END:
                slot[3] = v
            elif what == K_END_U:
                slot[1] = v
            elif what == K_START_U:
                slot[0] = v
            else:
                slot[0] = slot[1] = slot[2] = v


def build_group_model(program: Program, group: HeadGroup, heads: tuple[int, ...], dec, *, batch: int,
                      n_heads: int, seqlen: int, device, chunk_size: int = CHUNK, nt: int = NT) -> PreparedGroup:  # fmt: skip
    """What :func:`tilesparse.backends.cupy.index.build_group` computes (buckets from ``dec``);
    ``chunk_size`` and ``nt`` (tokens per program, threads per program) default to the kernels'."""
    B, T, Hg = batch, seqlen, len(heads)
    has_bucket, has_keep = group.has(SameBucket), group.has(Keep)
    n_buckets = group.buckets if has_bucket else 1
    sel = lambda t: select_heads(t, heads, n_heads).reshape(B * Hg, T).cpu()
    bins = []  # [side][b * Hg]: every token's bin
    for s in range(2):
        bucket = sel((dec.q_bucket, dec.k_bucket)[s]).long() if has_bucket else torch.zeros((B * Hg, T)).long()
        keep = sel((dec.q_keep, dec.k_keep)[s]).bool() if has_keep else None
        bins.append([token_bin(bucket[bh], None if keep is None else keep[bh], n_buckets) for bh in range(B * Hg)])
    counts = [[index_count(x, n_buckets + 1, chunk_size) for x in side] for side in bins]  # launch 1
    flags = predicate_bits(group)
    out = []
    for s, block in enumerate((program.block_q, program.block_k)):  # launch 2, side by side
        S, nb = max_segments(block, group.buckets), -(-T // block)
        per = []
        for bh in range(B * Hg):
            o = (*([UNSET] * T for _ in range(3)), [[[UNSET] * 4 for _ in range(S)] for _ in range(nb)], [UNSET] * nb)
            for chunk in range(len(counts[s][bh])):
                index_scatter(s, chunk, bins[s][bh], bins[1 - s][bh], counts[s][bh], counts[1 - s][bh], o,
                              n_buckets=n_buckets, block=block, max_seg=S, flags=flags, chunk_size=chunk_size, nt=nt)  # fmt: skip
            per.append(o)
        shapes = ((T,), (T,), (T,), (nb, S, 4), (nb,))
        out.append(
            tuple(
                torch.tensor([p[i] for p in per], dtype=torch.int32).view(B, Hg, *shape).to(device).contiguous()
                for i, shape in enumerate(shapes)
            )
        )
    return assemble_group(program, group, heads, dec, n_heads, T, device, out[0], out[1])
