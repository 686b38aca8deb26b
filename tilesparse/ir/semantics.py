"""What a pattern means, in one place: the element mask of a spec over its decisions, the
predicates a kernel evaluates inside a tile, and the sentinels of the index tensors.

``dense_mask`` is the definition of correct (the reference attends with it); ``element_mask``
and ``keep_element`` evaluate the IR's predicates over layout rows, as the kernels do, for the
IR's inspection tools and the torch models of the kernels. The sentinels are the values the
index builders write for dropped rows and the kernels test for; the Triton kernels keep a
``tl.constexpr`` copy of ``KEY_SENTINEL`` and the CUDA sources a ``#define``, each checked
against this one by a test. Nothing outside ``tilesparse.ir`` re-implements these
(``tests/test_imports.py`` checks that the sentinel is written only here and in the kernels).
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..patterns import Decisions, SpecBase
from .inputs import AttentionInputs
from .program import Causal, Keep, NotSelf, Predicate, SameBucket

__all__ = [
    "DROPPED_K_BUCKET",
    "DROPPED_Q_BUCKET",
    "KEY_SENTINEL",
    "QUERY_SENTINEL",
    "dense_mask",
    "element_mask",
    "keep_element",
]

QUERY_SENTINEL = -1  # q_pos of a dropped query: before every key
KEY_SENTINEL = 1 << 30  # k_pos of a dropped key: after every query
DROPPED_Q_BUCKET = -1  # bucket of a dropped row: never equal to a kept row's or each other's
DROPPED_K_BUCKET = -2


def dense_mask(
    spec: SpecBase, dec: Decisions, *, causal: bool, inputs: AttentionInputs, rows: tuple[int, int] | None = None
) -> Tensor | None:
    """(B, H, R, Tk) bool element mask of ``spec`` over ``dec`` for query rows ``rows``
    (default all: R = Tq); None when everything is kept. Query row i sits at absolute position
    Tk - Tq + i, so causality keeps j <= Tk - Tq + i (bottom-right)."""
    B, H, T = inputs.batch, inputs.heads, inputs.k_len
    off = inputs.q_offset
    r0, r1 = rows or (0, inputs.q_len)
    dev = inputs.device
    b = torch.arange(B, device=dev).view(B, 1, 1, 1)
    h = torch.arange(H, device=dev).view(1, H, 1, 1)
    i = torch.arange(r0, r1, device=dev).view(1, 1, r1 - r0, 1)
    j = torch.arange(T, device=dev).view(1, 1, 1, T)
    mod = spec.mask_mod(dec, off)
    mask = None if mod is None else mod(b, h, i, j).expand(B, H, r1 - r0, T)
    if causal:
        c = (j <= i + off).expand(B, H, r1 - r0, T)
        mask = c if mask is None else mask & c
    return mask


def keep_element(
    q_pos: Tensor,
    k_pos: Tensor,
    q_bucket: Tensor | None,
    k_bucket: Tensor | None,
    *,
    causal: bool,
    strict: bool = False,
    same_bucket: bool = False,
    not_self: bool = False,
) -> Tensor:
    """Whether each element of broadcastable layout-row values is kept: both rows valid (no
    sentinel), then causality (``k < q`` when ``strict``), the same bucket, not the same
    position, as the predicates' flags say."""
    keep = (q_pos >= 0) & (k_pos != KEY_SENTINEL)
    if causal:
        keep = keep & ((k_pos < q_pos) if strict else (k_pos <= q_pos))
    if same_bucket:
        keep = keep & (q_bucket == k_bucket)
    if not_self:
        keep = keep & (k_pos != q_pos)
    return keep


def element_mask(
    predicates: tuple[Predicate, ...], q_pos: Tensor, k_pos: Tensor, q_bucket: Tensor, k_bucket: Tensor
) -> Tensor:
    """The conjunction of ``predicates`` over broadcastable layout-row values (what a kernel
    evaluates inside a tile); sentinel positions fail every test."""
    for p in predicates:
        if not isinstance(p, Causal | Keep | SameBucket | NotSelf):  # Keep is the validity test
            raise TypeError(f"unknown predicate {p!r}")
    return keep_element(
        q_pos, k_pos, q_bucket, k_bucket,
        causal=any(isinstance(p, Causal) for p in predicates),
        strict=any(isinstance(p, Causal) and p.strict for p in predicates),
        same_bucket=any(isinstance(p, SameBucket) for p in predicates),
        not_self=any(isinstance(p, NotSelf) for p in predicates),
    )  # fmt: skip
