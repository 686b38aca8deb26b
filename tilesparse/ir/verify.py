"""Well-formedness as data: :func:`verify` lists every broken invariant of a prepared program.

Tests run it after ``prepare``; ``deep=True`` adds the tile checks (every kept element lies in
a visited tile, every tile run without the mask is full), which cost T x block memory.
"""

from __future__ import annotations

import torch

from .inspect import FULL, tile_map
from .prepare import Prepared, PreparedGroup
from .program import Layout, Program
from .semantics import KEY_SENTINEL, QUERY_SENTINEL
from .tiles import visited_tiles

__all__ = ["verify"]


def verify(program: Program, prepared: Prepared, *, deep: bool = False, block_n: tuple[int, ...] = ()) -> list[str]:
    """Every violated invariant, as a sentence; empty when the program is well formed.

    ``block_n`` lists the tile widths to check the deep tile invariants for (default: the
    program's own block sizes).
    """
    errors: list[str] = []
    if prepared.program is not program:
        errors.append("prepared.program is not the program given")
    seen: list[int] = []
    for g in prepared.groups:
        errors += [f"group {g.heads}: {e}" for e in _verify_group(g, deep, block_n)]
        seen += g.heads
    if sorted(seen) != list(range(prepared.heads)):
        errors.append(f"groups cover heads {sorted(seen)}, expected each of 0..{prepared.heads - 1} once")
    return errors


def _verify_group(g: PreparedGroup, deep: bool, block_n: tuple[int, ...]) -> list[str]:
    e: list[str] = []
    T = g.seqlen
    B, Hg = g.q_order.shape[:2]
    Tq = g.q_order.shape[2] if g.q_order.dim() == 3 else -1
    if not 1 <= Tq <= T:
        e.append(f"q_order must be (B, Hg, Tq) with 1 <= Tq <= Tk={T}, got {tuple(g.q_order.shape)}")
        return e
    lens = {"q": Tq, "k": T}
    for name in ("q_order", "q_pos", "q_bucket", "k_order", "k_pos", "k_bucket"):
        t = getattr(g, name)
        want = (B, Hg, lens[name[0]])
        if tuple(t.shape) != want or t.dtype != torch.int32 or not t.is_contiguous():
            e.append(f"{name} must be contiguous int32 {want}, got {t.dtype} {tuple(t.shape)}")
    if e:
        return e
    for side, sentinel in (("q", QUERY_SENTINEL), ("k", KEY_SENTINEL)):
        n = lens[side]
        offset = T - n  # absolute position of row 0
        arange = torch.arange(n, device=g.q_order.device)
        order = getattr(g, f"{side}_order").to(torch.int64)
        pos = getattr(g, f"{side}_pos").to(torch.int64)
        bucket = getattr(g, f"{side}_bucket").to(torch.int64)
        if not torch.equal(order.sort(dim=-1).values, arange.expand_as(order)):
            e.append(f"{side}_order is not a permutation of 0..{n - 1} in every (b, h)")
        valid = pos != sentinel
        if not torch.equal(torch.where(valid, order + offset, sentinel), pos):
            plus = f" + {offset}" if offset else ""
            e.append(f"{side}_pos must equal {side}_order{plus} on kept rows and {sentinel} on dropped ones")
        if bool((valid[..., 1:] & ~valid[..., :-1]).any()):
            e.append(f"{side}: a kept row follows a dropped row (dropped rows must come last)")
        if not g.group.layout.compacts and not bool(valid.all()):
            e.append(f"{side}: layout {g.group.layout.value} drops rows")
        key = torch.where(valid, bucket * T + pos, (g.group.buckets + 1) * T)
        if bool((key[..., 1:] < key[..., :-1]).any()):
            e.append(f"{side}: kept rows are not ordered by (bucket, position)")
        if g.group.layout is Layout.IDENTITY and not torch.equal(order, arange.expand_as(order)):
            e.append(f"{side}: identity layout with a non-identity order")
        if bool((valid & ((bucket < 0) | (bucket >= g.group.buckets))).any()):
            e.append(f"{side}_bucket out of [0, {g.group.buckets}) on a kept row")
    for side, block in (("q", g.block_q), ("k", g.block_k)):
        ranges, nseg = getattr(g, f"{side}_ranges"), getattr(g, f"{side}_nseg")
        nb = -(-lens[side] // block)
        other = lens["k" if side == "q" else "q"]
        S = ranges.shape[3]
        if tuple(ranges.shape) != (B, Hg, nb, S, 4) or ranges.dtype != torch.int32:
            e.append(f"{side}_ranges must be int32 {(B, Hg, nb, S, 4)}, got {ranges.dtype} {tuple(ranges.shape)}")
            continue
        if tuple(nseg.shape) != (B, Hg, nb) or bool(((nseg < 0) | (nseg > S)).any()):
            e.append(f"{side}_nseg must be (B, Hg, nb) within [0, {S}]")
            continue
        lo, flo, fhi, hi = ranges.unbind(-1)
        used = torch.arange(S, device=ranges.device) < nseg.unsqueeze(-1)
        ordered = (lo <= flo) & (flo <= fhi) & (fhi <= hi) & (lo >= 0) & (hi <= other)
        if bool((used & ~ordered).any()):
            bound = "T" if other == T else "Tq"  # the other side's row count
            e.append(f"{side}_ranges must satisfy 0 <= lo <= full_lo <= full_hi <= hi <= {bound}")
        if bool((~used.unsqueeze(-1) & (ranges != 0)).any()):
            e.append(f"{side}_ranges: unused segment slots must be zero")
        later = used[..., 1:]
        if bool((later & (lo[..., 1:] < hi[..., :-1])).any()):
            e.append(f"{side}_ranges: a segment's rows overlap the previous segment's")
    if deep:
        e += _verify_tiles(g, block_n or (g.block_k,))
    return e


def _verify_tiles(g: PreparedGroup, widths: tuple[int, ...]) -> list[str]:
    e: list[str] = []
    for by_keys, (ranges, nseg, block) in (
        (False, (g.q_ranges, g.q_nseg, g.block_q)),
        (True, (g.k_ranges, g.k_nseg, g.block_k)),
    ):
        what = "backward key-block" if by_keys else "forward query-block"
        for bn in widths:
            tm = tile_map(g, bn, by_keys=by_keys)
            visited, unmasked = visited_tiles(ranges, nseg, bn, tm.shape[-1])
            if n := int(((tm > 0) & ~visited).sum()):
                e.append(f"{what} tiles ({block}x{bn}): {n} hold kept elements but are skipped")
            if n := int((unmasked & (tm != FULL)).sum()):
                e.append(f"{what} tiles ({block}x{bn}): {n} run without the mask but are not full")
    return e
