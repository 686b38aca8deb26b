"""Looking at a prepared program: the dense mask it stands for, its tile map, its sparsity.

Everything here is for tests, ``explain()`` and the demo: :func:`to_dense` builds a T x T
mask (Tq x Tk), the tile functions work one query block at a time (memory T x block, not T x T).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .prepare import Prepared, PreparedGroup
from .semantics import element_mask
from .tiles import visited_tiles

__all__ = [
    "ideal_tiles",
    "layout_mask_rows",
    "sparsity",
    "tile_classes",
    "tile_map",
    "tile_stats",
    "to_dense",
    "to_string",
]

EMPTY, PARTIAL, FULL = 0, 1, 2


def layout_mask_rows(g: PreparedGroup, r0: int, r1: int, *, by_keys: bool = False) -> Tensor:
    """(B, Hg, r1 - r0, Tk) bool: the element mask of query rows [r0, r1) against every key row,
    both in layout order, evaluated from the index tensors alone. ``by_keys``: key rows
    [r0, r1) against every query row (the backward pass's view)."""
    rows, cols = (slice(r0, r1), None), (None, slice(None))
    if by_keys:
        rows, cols = cols, rows
    qp, qb = g.q_pos[..., rows[0], rows[1]].to(torch.int64), g.q_bucket[..., rows[0], rows[1]]
    kp, kb = g.k_pos[..., cols[0], cols[1]].to(torch.int64), g.k_bucket[..., cols[0], cols[1]]
    return element_mask(g.group.predicates, qp, kp, qb, kb)


def _group_to_dense(g: PreparedGroup) -> Tensor:
    lm = layout_mask_rows(g, 0, g.q_len)
    inv_q = torch.argsort(g.q_order.to(torch.int64), dim=-1)
    inv_k = torch.argsort(g.k_order.to(torch.int64), dim=-1)
    rows = torch.gather(lm, 2, inv_q.unsqueeze(-1).expand_as(lm))
    return torch.gather(rows, 3, inv_k.unsqueeze(-2).expand_as(rows))


def to_dense(p: Prepared | PreparedGroup) -> Tensor:
    """The element mask, (B, H, Tq, Tk) bool in original rows ((B, Hg, Tq, Tk) for a group)."""
    if isinstance(p, PreparedGroup):
        return _group_to_dense(p)
    tq = p.seqlen if p.q_len is None else p.q_len
    out = torch.zeros((p.batch, p.heads, tq, p.seqlen), dtype=torch.bool, device=_device(p))
    for g in p.groups:
        out[:, list(g.heads)] = _group_to_dense(g)
    return out


def _device(p: Prepared) -> torch.device:
    return p.groups[0].q_order.device if p.groups else torch.device("cpu")


def _tile_counts(g: PreparedGroup, block_n: int, by_keys: bool = False) -> tuple[Tensor, Tensor]:
    """(kept elements, in-bounds elements) per (query block, key tile), layout order; with
    ``by_keys`` per (key block, query tile)."""
    T_rows, T_cols = (g.k_len, g.q_len) if by_keys else (g.q_len, g.k_len)
    bq = g.block_k if by_keys else g.block_q
    nq, nk = -(-T_rows // bq), -(-T_cols // block_n)
    B, Hg = g.q_order.shape[:2]
    kept = torch.zeros((B, Hg, nq, nk), dtype=torch.int64, device=g.q_order.device)
    pad = nk * block_n - T_cols
    for m in range(nq):
        r0, r1 = m * bq, min(T_rows, (m + 1) * bq)
        rows = torch.nn.functional.pad(layout_mask_rows(g, r0, r1, by_keys=by_keys), (0, pad))
        kept[:, :, m] = rows.view(B, Hg, r1 - r0, nk, block_n).sum(dim=(2, 4))
    q_rows = torch.clamp(T_rows - torch.arange(nq) * bq, max=bq)
    k_cols = torch.clamp(T_cols - torch.arange(nk) * block_n, max=block_n)
    size = (q_rows[:, None] * k_cols[None, :]).to(kept.device)
    return kept, size


def tile_map(g: PreparedGroup, block_n: int | None = None, *, by_keys: bool = False) -> Tensor:
    """(B, Hg, nQB, nKT) int8 in layout order: 0 empty, 1 partial, 2 full (every element kept).
    ``by_keys``: (B, Hg, nKB, nQT), key blocks of ``block_k`` rows against query tiles."""
    kept, size = _tile_counts(g, block_n or g.block_k, by_keys)
    out = torch.full(kept.shape, PARTIAL, dtype=torch.int8, device=kept.device)
    out[kept == 0] = EMPTY
    out[kept == size] = FULL
    return out


def ideal_tiles(g: PreparedGroup, block_n: int | None = None, *, by_keys: bool = False) -> Tensor:
    """(B, Hg, nQB, nKT) bool: tiles holding at least one kept element (``by_keys``: per key
    block against query tiles)."""
    return _tile_counts(g, block_n or g.block_k, by_keys)[0] > 0


def tile_stats(g: PreparedGroup, block_n: int | None = None, *, exact: bool = True) -> dict[str, float]:
    """Visited, unmasked and (with ``exact``) ideal tile counts for query blocks x key tiles
    ``block_n`` wide, and the visited fraction of the dense causal tile count."""
    bn = block_n or g.block_k
    T = g.k_len
    nk = -(-T // bn)
    visited, unmasked = visited_tiles(g.q_ranges, g.q_nseg, bn, nk)
    B, Hg = g.q_order.shape[:2]
    nq = g.num_q_blocks
    if g.group.causal is not None:
        # the last absolute position of each query block
        qi = torch.arange(nq)[:, None] * g.block_q + g.block_q - 1 + g.q_offset
        dense = int(((torch.arange(nk)[None, :] * bn) <= qi.clamp(max=T - 1)).sum()) * B * Hg
    else:
        dense = nq * nk * B * Hg
    out = {
        "visited": int(visited.sum()),
        "unmasked": int(unmasked.sum()),
        "dense_tiles": dense,
        "visited_fraction": int(visited.sum()) / max(dense, 1),
    }
    if exact:
        ideal = ideal_tiles(g, bn)
        out["ideal"] = int(ideal.sum())
        out["ideal_fraction"] = out["ideal"] / max(dense, 1)
        out["missed"] = int((ideal & ~visited).sum())  # a kept element in a skipped tile: a bug
    return out


def sparsity(p: Prepared | PreparedGroup, block_n: int | None = None) -> float:
    """1 - visited tiles / dense (causal) tiles, over every group."""
    groups = p.groups if isinstance(p, Prepared) else (p,)
    stats = [tile_stats(g, block_n, exact=False) for g in groups]
    visited = sum(s["visited"] for s in stats)
    dense = sum(s["dense_tiles"] for s in stats)
    return 1.0 - visited / max(dense, 1)


# what a kernel does with a tile, as tile_classes reports it; TILE_CHARS draws them
SKIPPED, MISSED, VISITED_EMPTY, VISITED_PARTIAL, UNMASKED = range(5)
TILE_CHARS = ".!o+#"


def tile_classes(g: PreparedGroup, *, batch: int = 0, head: int = 0, block_n: int | None = None) -> Tensor:
    """(nQB, nKT) int8 for one (batch, head) in layout order: what the kernel does with each
    tile. ``UNMASKED`` full, run without the mask; ``VISITED_PARTIAL`` visited with the mask;
    ``VISITED_EMPTY`` visited but empty (the range was not tight); ``SKIPPED`` empty and
    skipped; ``MISSED`` holds a kept element but was skipped (never, in a correct program)."""
    bn = block_n or g.block_k
    tm = tile_map(g, bn)[batch, head]
    visited, unmasked = visited_tiles(g.q_ranges[batch, head], g.q_nseg[batch, head], bn, tm.shape[-1])
    visited, unmasked = visited.to(tm.device), unmasked.to(tm.device)
    out = torch.where(tm == EMPTY, SKIPPED, MISSED)
    out = torch.where(visited, torch.where(tm == EMPTY, VISITED_EMPTY, VISITED_PARTIAL), out)
    return torch.where(visited & unmasked, UNMASKED, out).to(torch.int8)


def to_string(g: PreparedGroup, *, batch: int = 0, head: int = 0, block_n: int | None = None, limit: int = 64) -> str:
    """ASCII tile map of one (batch, head) in layout order, one character a tile of
    :func:`tile_classes`: ``#`` full tile, run unmasked; ``+`` partial tile, visited; ``o``
    visited but empty (the range was not tight); ``.`` empty and skipped; ``!`` holds a kept
    element but was skipped (never printed by a correct program).
    """
    bn = block_n or g.block_k
    classes = tile_classes(g, batch=batch, head=head, block_n=bn)[:limit, :limit].tolist()
    lines = [f"head {g.heads[head]} ({g.group.layout.value}), {g.block_q}x{bn} tiles, layout order:"]
    lines += ["".join(TILE_CHARS[c] for c in row) for row in classes]
    return "\n".join(lines)
