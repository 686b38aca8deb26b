"""``prepare``: decisions become the runtime index tensors a kernel reads.

Per head group, in O(T) memory per head (a sort, per-block scans and a handful of binary
searches; no T x T tensor anywhere):

1. layout: the row order of Q and of K (a stable sort by (bucket, position) with dropped rows
   moved to the end), the original position of each row (sentinel for a dropped row: -1 for
   queries, ``KEY_SENTINEL`` for keys) and its bucket;
2. segments: every query block (``block_q`` rows) splits into runs of one bucket;
3. ranges: for each segment, the rows of the key layout that can hold a kept element, as
   ``(lo, full_lo, full_hi, hi)``; the same for key blocks (``block_k`` rows) against the query
   layout, for the dK/dV pass.

With queries shorter than keys (Tq <= Tk) query row i sits at absolute position Tk - Tq + i:
``q_pos`` holds absolute positions, so every predicate (causality included) compares positions
on one axis and the kernels need no offset; sort keys use Tk as the position span for both
sides.

Ranges are in *rows*, not blocks, so a kernel picks its own tile width ``BN`` along the other
side: it visits tiles ``[lo // BN, ceil(hi / BN))``, skipping any tile an earlier segment of the
same block already visited, and runs tiles ``[ceil(full_lo / BN), full_hi // BN)`` without
the mask because every element in them is kept. A segment's rows are all in its block, and the
query with the segment's extreme position keeps a key of every visited tile, so the visited
tiles are exactly the non-empty ones when each block holds one segment per bucket.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ..patterns import Decisions
from ..patterns.device_constants import device_constant
from .inputs import tensor_size
from .program import FeatureDotScore, HeadGroup, Keep, Layout, NotSelf, Program, SameBucket
from .semantics import DROPPED_K_BUCKET, DROPPED_Q_BUCKET, KEY_SENTINEL, QUERY_SENTINEL

__all__ = [
    "DROPPED_K_BUCKET",
    "DROPPED_Q_BUCKET",
    "KEY_SENTINEL",
    "QUERY_SENTINEL",
    "Prepared",
    "PreparedGroup",
    "assemble_group",
    "copy_group",
    "feature_supports",
    "head_flags",
    "head_index",
    "head_slots",
    "head_map",
    "max_segments",
    "prepare",
    "prepare_group",
    "resolve_heads",
    "select_heads",
]


@dataclass(frozen=True, eq=False)
class PreparedGroup:
    """Index tensors of one head group; ``Hg = len(heads)``, Tq query rows, Tk = ``seqlen`` key rows.

    ============ ================== =========================================================
    q_order      (B, Hg, Tq) int32  layout row r reads original row q_order[r] (a permutation)
    q_pos        (B, Hg, Tq) int32  absolute position of row r (Tk - Tq + q_order[r]); -1
                                    when the query is dropped
    q_bucket     (B, Hg, Tq) int32  bucket of row r; -1 when dropped
    k_order      (B, Hg, Tk) int32  as q_order, for keys (and values)
    k_pos        (B, Hg, Tk) int32  as q_pos (= k_order); KEY_SENTINEL when the key is dropped
    k_bucket     (B, Hg, Tk) int32  as q_bucket; -2 when dropped
    q_ranges     (B, Hg, nQB, S, 4) int32  per query block and segment: key rows
                                   (lo, full_lo, full_hi, hi); slots >= q_nseg are zero
    q_nseg       (B, Hg, nQB) int32  segments of each query block
    k_ranges     (B, Hg, nKB, S, 4) int32  per key block and segment: query rows
    k_nseg       (B, Hg, nKB) int32
    q_support    (B, Hg, T, k) int32 feature ids, original order (FeatureDotScore) or None
    k_support    likewise
    flags        the call's two non-finite flags, (1,) int32 each (the forward pass's, the
                 backward pass's), zeroed by a build that writes them (Triton's, with a split
                 counter per batch-head and block of the larger side after them, zeroed too),
                 else None (the attention step zeroes flags of its own)
    fixed_args   a dict where the group's tensors are views a build keeps and lends again (the
                 Triton build's): the attention backend keeps there what it reads of them once
                 (launch.Fixed blocks), shared by every copy of the kept group; None otherwise
    ============ ================= ==========================================================

    The dense mask it stands for, rebuilt from these tensors (what :meth:`to_dense` does)::

        for r in range(Tq):                # query rows, layout order
            for c in range(Tk):            # key rows, layout order
                i, j = q_order[r], k_order[c]
                mask[i, j] = (q_pos[r] >= 0 and k_pos[c] != KEY_SENTINEL
                              and all(p(q_pos[r], k_pos[c], q_bucket[r], k_bucket[c])
                                      for p in group.predicates))
    """

    group: HeadGroup
    heads: tuple[int, ...]
    head_map: Tensor
    seqlen: int
    block_q: int
    block_k: int
    q_order: Tensor
    q_pos: Tensor
    q_bucket: Tensor
    k_order: Tensor
    k_pos: Tensor
    k_bucket: Tensor
    q_ranges: Tensor
    q_nseg: Tensor
    k_ranges: Tensor
    k_nseg: Tensor
    q_support: Tensor | None = None
    k_support: Tensor | None = None
    flags: tuple[Tensor, Tensor] | None = None
    fixed_args: dict | None = field(default=None, repr=False)

    q_len = tensor_size("q_order", 2, "Tq, the query rows (``seqlen`` is Tk, the key rows).")
    k_len = tensor_size("k_order", 2)
    num_q_blocks = tensor_size("q_ranges", 2)
    num_k_blocks = tensor_size("k_ranges", 2)

    @property
    def q_offset(self) -> int:
        """Tk - Tq: the absolute position of query row 0."""
        return self.k_order.shape[2] - self.q_order.shape[2]

    def __repr__(self) -> str:
        B, Hg, T = self.q_order.shape
        size = f"T={T}" if T == self.k_len else f"Tq={T}, Tk={self.k_len}"
        return (
            f"PreparedGroup({self.group.describe()}, B={B}, Hg={Hg}, {size}, "
            f"blocks=({self.block_q}, {self.block_k}), segments<={self.q_ranges.shape[3]})"
        )



@dataclass(frozen=True, eq=False)
class Prepared:
    """Prepared index tensors for every head group of a program (``seqlen`` = Tk, ``q_len``
    = Tq; None for Tq == Tk)."""

    program: Program
    groups: tuple[PreparedGroup, ...]
    batch: int
    heads: int
    seqlen: int
    q_len: int | None = None

    def __repr__(self) -> str:
        inner = "\n  ".join(repr(g) for g in self.groups)
        size = f"T={self.seqlen}" if self.q_len in (None, self.seqlen) else f"Tq={self.q_len}, Tk={self.seqlen}"
        return f"Prepared(B={self.batch}, H={self.heads}, {size},\n  {inner})"


def resolve_heads(program: Program, heads: int) -> list[tuple[int, ...]]:
    """The query heads of each group; ``None`` takes the heads no other group names."""
    named = [h for g in program.groups if g.heads is not None for h in g.heads]
    if bad := [h for h in named if h >= heads]:
        raise ValueError(f"head indices {bad} are out of range for {heads} query heads")
    rest = tuple(h for h in range(heads) if h not in named)
    out = [g.heads if g.heads is not None else rest for g in program.groups]
    return out


def prepare(
    program: Program, decisions: Decisions, *, batch: int, heads: int, seqlen: int, device, q_len: int | None = None
) -> Prepared:
    """Build every group's index tensors from ``decisions`` (validated by the caller);
    ``seqlen`` is Tk, ``q_len`` Tq (default Tk)."""
    groups = []
    for group, hs in zip(program.groups, resolve_heads(program, heads), strict=True):
        if not hs:
            continue
        groups.append(prepare_group(program, group, hs, decisions, batch=batch, heads=heads, seqlen=seqlen,
                                    device=device, q_len=q_len))  # fmt: skip
    return Prepared(program, tuple(groups), batch, heads, seqlen, q_len)


def select_heads(t: Tensor | None, hs: tuple[int, ...], heads: int) -> Tensor | None:
    """The (B, len(hs), ...) view of decision tensor ``t`` on query heads ``hs`` out of
    ``heads`` (``t`` itself when ``hs`` is every head; None stays None)."""
    if t is None or len(hs) == heads:
        return t
    if hs and hs == tuple(range(hs[0], hs[-1] + 1)):
        return t[:, hs[0] : hs[-1] + 1]
    return t.index_select(1, head_index(tuple(hs), t.device))


def prepare_group(
    program: Program,
    group: HeadGroup,
    hs: tuple[int, ...],
    dec: Decisions,
    *,
    batch: int,
    heads: int,
    seqlen: int,
    device,
    q_len: int | None = None,
) -> PreparedGroup:
    """One group's index tensors, for query heads ``hs`` out of ``heads``; ``seqlen`` keys (Tk)
    and ``q_len`` queries (Tq, default Tk) at absolute positions Tk - Tq + row."""
    B, H, T, device = batch, heads, seqlen, torch.device(device)
    Tq = T if q_len is None else q_len
    Hg = len(hs)
    sel = lambda t: select_heads(t, hs, H)  # noqa: E731

    keep_q = sel(dec.q_keep) if group.has(Keep) else None
    keep_k = sel(dec.k_keep) if group.has(Keep) else None
    bkt_q = sel(dec.q_bucket) if group.has(SameBucket) else None
    bkt_k = sel(dec.k_bucket) if group.has(SameBucket) else None
    q_key, q_order, q_pos, q_bucket = _layout(group.layout, keep_q, bkt_q, (B, Hg, Tq), group.buckets, device,
                                              query=True, span=T)  # fmt: skip
    k_key, k_order, k_pos, k_bucket = _layout(group.layout, keep_k, bkt_k, (B, Hg, T), group.buckets, device,
                                              query=False, span=T)  # fmt: skip

    causal = group.causal
    strict = causal is not None and causal.strict
    not_self = group.has(NotSelf)
    q_ranges, q_nseg = _ranges(
        q_key, k_key, program.block_q, T, group.buckets, causal=causal, strict=strict, not_self=not_self, query_side=True
    )
    k_ranges, k_nseg = _ranges(
        k_key, q_key, program.block_k, T, group.buckets, causal=causal, strict=strict, not_self=not_self, query_side=False
    )
    return assemble_group(
        program, group, hs, dec, H, T, device,
        (q_order, q_pos, q_bucket, q_ranges, q_nseg), (k_order, k_pos, k_bucket, k_ranges, k_nseg),
    )  # fmt: skip


_SIDE_FIELDS = ("order", "pos", "bucket", "ranges", "nseg")
"""A side tuple's PreparedGroup fields, in order; each is ``q_`` or ``k_`` prefixed."""


def copy_group(g: PreparedGroup, **fields) -> PreparedGroup:
    """A new PreparedGroup holding ``g``'s fields (the same tensors) but ``fields``, made
    without ``__init__`` (0.5 us against :func:`assemble_group`'s 6.4 on a CPU): for a builder
    that hands out the same views again (and a call's own feature supports). The copy shares
    ``g.fixed_args`` unless ``fields`` replace a tensor the backend reads from it."""
    copy = object.__new__(PreparedGroup)
    copy.__dict__.update(g.__dict__)
    if fields:
        if "fixed_args" not in fields and not fields.keys() <= _OUTSIDE_FIXED_ARGS:
            fields = {**fields, "fixed_args": None}
        copy.__dict__.update(fields)
    return copy


# fields the attention backend never reads through ``fixed_args``
_OUTSIDE_FIXED_ARGS = frozenset({"q_support", "k_support"})


def feature_supports(group: HeadGroup, hs: tuple[int, ...], dec, heads: int) -> dict:
    """The group's ``q_support`` and ``k_support`` fields from decisions ``dec``: int32
    (B, len(hs), T, k) for a :class:`FeatureDotScore`, None for any other score."""
    if not isinstance(group.score, FeatureDotScore):
        return dict(q_support=None, k_support=None)
    return dict(q_support=select_heads(dec.q_support, hs, heads).to(torch.int32).contiguous(),
                k_support=select_heads(dec.k_support, hs, heads).to(torch.int32).contiguous())  # fmt: skip


def assemble_group(program, group, hs, dec, heads, seqlen, device, q_side, k_side, *, hmap: Tensor | None = None,
                   flags: tuple[Tensor, Tensor] | None = None) -> PreparedGroup:  # fmt: skip
    """A PreparedGroup from each side's (order, pos, bucket, ranges, nseg), with the feature
    supports the score needs; shared by this module and fused index builders. ``hmap``: the
    group's :func:`head_map`, where the caller holds it already; ``flags``: the non-finite
    flags the build zeroed."""
    sides = {
        f"{prefix}_{name}": tensor
        for prefix, side in (("q", q_side), ("k", k_side))
        for name, tensor in zip(_SIDE_FIELDS, side, strict=True)
    }
    return PreparedGroup(
        group=group,
        heads=tuple(hs),
        head_map=head_map(tuple(hs), torch.device(device)) if hmap is None else hmap,
        seqlen=seqlen,
        block_q=program.block_q,
        block_k=program.block_k,
        **sides,
        **feature_supports(group, hs, dec, heads),
        flags=flags,
    )


def head_map(heads: tuple[int, ...], device: torch.device) -> Tensor:
    """The group's query heads as an int32 device tensor (kept: one upload per group, outside
    any CUDA graph pool; see ``patterns.device_constants``)."""
    return device_constant(tuple(heads), torch.int32, torch.device(device))


def head_flags(heads: tuple[int, ...], flagged: tuple[int, ...], batch: int, device: torch.device) -> Tensor:
    """int32 (batch * len(heads),): 1 at each (batch, head) whose query head is in ``flagged``,
    else 0, batch slowest (kept, as :func:`head_map`)."""
    row = tuple(int(h in flagged) for h in heads)
    return device_constant(row * batch, torch.int32, torch.device(device))


def head_slots(heads: tuple[int, ...], n_heads: int, device: torch.device) -> Tensor:
    """int32 (n_heads,): the position of each of the call's ``n_heads`` query heads in the
    group's ``heads``, -1 for a head outside it (kept, as :func:`head_map`)."""
    return device_constant(_slots(heads, n_heads), torch.int32, torch.device(device))


@functools.lru_cache(maxsize=256)
def _slots(heads: tuple[int, ...], n_heads: int) -> tuple[int, ...]:
    """:func:`head_slots`' values, made once per head list (a call asks twice: q and k)."""
    slots = [-1] * n_heads
    for i, h in enumerate(heads):
        slots[h] = i
    return tuple(slots)


def head_index(heads: tuple[int, ...], device: torch.device) -> Tensor:
    """``heads`` as an int64 index tensor on ``device`` (kept: one upload, at the first call;
    indexing with a Python list would upload it on every call, a copy that waits for the
    host and that a CUDA graph cannot capture)."""
    return device_constant(tuple(heads), torch.int64, torch.device(device))


def _big(T: int, buckets: int) -> int:
    """Sort key of a dropped row: past every kept row's bucket * T + position."""
    return (buckets + 1) * T


def _layout(layout: Layout, keep, bucket, shape, buckets: int, device, *, query: bool, span: int):
    """(sort key, order, pos, bucket) per layout row of a side with ``shape[-1]`` rows, the
    last of ``span`` positions; the sort key is bucket * span + absolute position for a kept
    row and ``_big`` for a dropped one, ascending along the rows."""
    B, Hg, L = shape
    T = span
    offset = T - L
    rows = torch.arange(L, device=device, dtype=torch.int64).expand(shape)
    pos = rows + offset
    if layout is Layout.IDENTITY:
        order = rows.to(torch.int32).contiguous()
        zeros = torch.zeros(shape, dtype=torch.int32, device=device)
        return pos.contiguous(), order, pos.to(torch.int32).contiguous(), zeros
    key = pos if bucket is None else bucket.to(torch.int64) * T + pos
    big = _big(T, buckets)
    if keep is not None:
        key = torch.where(keep, key, big + pos)
    skey, order = torch.sort(key, dim=-1)
    valid = skey < big
    order = order.to(torch.int32)
    sentinel = QUERY_SENTINEL if query else KEY_SENTINEL
    row_pos = torch.where(valid, order + offset, sentinel)
    dropped_bucket = DROPPED_Q_BUCKET if query else DROPPED_K_BUCKET
    row_bucket = torch.where(valid, skey // T, dropped_bucket).to(torch.int32)
    skey = torch.where(valid, skey, big)
    return skey, order.contiguous(), row_pos.to(torch.int32).contiguous(), row_bucket.contiguous()


def max_segments(block: int, buckets: int) -> int:
    """Segment slots per block of ``block`` rows (the ranges' third dim): a block holds at most
    one segment per bucket and per row, and always has one slot."""
    return max(1, min(block, buckets))


def _ranges(rows_key, other_key, block, T, buckets, *, causal, strict, not_self, query_side):
    """Segments of each block of this side's rows and, per segment, the other side's rows
    ``(lo, full_lo, full_hi, hi)`` that can hold kept elements (see the module docstring)."""
    B, Hg, L = rows_key.shape
    device = rows_key.device
    nb = -(-L // block)
    big = _big(T, buckets)
    key = torch.nn.functional.pad(rows_key, (0, nb * block - L), value=big).view(B, Hg, nb, block)
    valid = key < big
    bucket = torch.where(valid, key // T, -1)
    pos = key % T
    # a segment starts at a valid row whose bucket differs from the row before (or at row 0)
    prev = torch.nn.functional.pad(bucket[..., :-1], (1, 0), value=-1)
    starts = valid & (bucket != prev)
    nseg = starts.sum(-1, dtype=torch.int32)
    S = max_segments(block, buckets)
    seg = torch.where(valid, starts.cumsum(-1) - 1, S)  # invalid rows go to a spill slot
    slot = (torch.arange(B * Hg * nb, device=device).view(B, Hg, nb, 1) * (S + 1) + seg).flatten()
    n_slots = B * Hg * nb * (S + 1)

    def reduce(init: int, src: Tensor, how: str) -> Tensor:
        out = torch.full((n_slots,), init, dtype=torch.int64, device=device)
        return out.scatter_reduce_(0, slot, src.flatten(), how, include_self=True).view(B, Hg, nb, S + 1)[..., :S]

    seg_bucket = reduce(-1, bucket, "amax")
    pmin = reduce(T, pos, "amin")
    pmax = reduce(-1, pos, "amax")
    base = seg_bucket.clamp_min(0) * T
    flat = lambda t: t.reshape(B, Hg, nb * S)  # noqa: E731

    def find(values: Tensor, right: bool) -> Tensor:
        return torch.searchsorted(other_key, flat(values), right=right).view(B, Hg, nb, S)

    bucket_start = find(base, right=False)
    bucket_end = find(base + T, right=False)
    if causal is None:
        lo, hi = bucket_start, bucket_end
        full_lo, full_hi = lo, (lo if not_self else hi)
    elif query_side:
        # keys of the segment's bucket at or before its latest query (strictly before if strict)
        lo = bucket_start
        hi = find(base + pmax, right=not strict)
        full_lo, full_hi = lo, find(base + pmin, right=not strict)
    else:
        # queries of the segment's bucket at or after its earliest key (strictly after if strict)
        lo = find(base + pmin, right=strict)
        hi = bucket_end
        full_lo, full_hi = find(base + pmax, right=strict), hi
    # full tiles need a block that is one segment of valid rows
    uniform = ((nseg == 1) & valid.all(-1)).unsqueeze(-1)
    full_lo = torch.where(uniform, full_lo, lo)
    full_hi = torch.where(uniform, torch.maximum(full_hi, full_lo), full_lo)
    used = torch.arange(S, device=device) < nseg.unsqueeze(-1)
    ranges = torch.stack([lo, full_lo, full_hi, hi], dim=-1)
    ranges = torch.where(used.unsqueeze(-1), ranges, 0).to(torch.int32).contiguous()
    return ranges, nseg.contiguous()
