"""The IR: a closed set of frozen node kinds that say what a kernel must compute.

A :class:`Program` is a tuple of :class:`HeadGroup`; each group names its heads and carries

- a :class:`Layout`: the order in which rows of Q and K are visited;
- a conjunction of predicates, each an element test evaluated inside a tile;
- a score kind: the dot over all features, or over each side's kept features;

and the program carries the block sizes the index tensors are built for.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

__all__ = [
    "Causal",
    "DotScore",
    "FeatureDotScore",
    "HeadGroup",
    "Keep",
    "Layout",
    "NotSelf",
    "Predicate",
    "Program",
    "SameBucket",
    "Score",
]


class Layout(enum.Enum):
    """Row order of Q and K for one head: which rows take part and in which order."""

    IDENTITY = "identity"  # every row, in original order
    COMPACT = "compact"  # kept rows in original order, then the dropped rows as sentinels
    SORT = "sort"  # rows stably sorted by bucket: original order holds inside a bucket
    COMPACT_SORT = "compact_sort"  # kept rows stably sorted by bucket, then dropped sentinels

    @property
    def compacts(self) -> bool:
        return self in (Layout.COMPACT, Layout.COMPACT_SORT)

    @property
    def sorts(self) -> bool:
        return self in (Layout.SORT, Layout.COMPACT_SORT)

    @staticmethod
    def of(*, compact: bool, sort: bool) -> Layout:
        return {
            (False, False): Layout.IDENTITY,
            (True, False): Layout.COMPACT,
            (False, True): Layout.SORT,
            (True, True): Layout.COMPACT_SORT,
        }[(compact, sort)]


@dataclass(frozen=True, slots=True)
class Causal:
    """pos_k <= pos_q on original positions (pos_k < pos_q when ``strict``)."""

    strict: bool = False


@dataclass(frozen=True, slots=True)
class Keep:
    """keep_q[i] and keep_k[j]: both tokens survived the drop."""


@dataclass(frozen=True, slots=True)
class SameBucket:
    """bucket_q[i] == bucket_k[j]."""


@dataclass(frozen=True, slots=True)
class NotSelf:
    """pos_k != pos_q (attend_self=False without causality; with it, Causal(strict=True))."""


Predicate = Causal | Keep | SameBucket | NotSelf


@dataclass(frozen=True, slots=True)
class DotScore:
    """q . k over all D features."""


@dataclass(frozen=True, slots=True)
class FeatureDotScore:
    """q~ . k~: the dot over each side's ``k`` kept features (the others count as zero)."""

    k: int


Score = DotScore | FeatureDotScore


@dataclass(frozen=True, slots=True)
class HeadGroup:
    """Heads that share one layout, predicate set and score kind.

    ``heads`` is None for "every head that no other group names" (the head count is only
    known at call time); ``buckets`` is the number of bucket values (1 without SameBucket).
    ``keep`` is the fraction of tokens the spec expects to keep (QKDrop's ``keep``): a hint the
    planner prices with, not part of the mask, so it takes no part in equality.
    """

    heads: tuple[int, ...] | None
    layout: Layout
    predicates: tuple[Predicate, ...]
    score: Score
    buckets: int = 1
    keep: float = field(default=1.0, compare=False)

    def has(self, kind: type) -> bool:
        return any(isinstance(p, kind) for p in self.predicates)

    @property
    def causal(self) -> Causal | None:
        return next((p for p in self.predicates if isinstance(p, Causal)), None)

    def describe(self) -> str:
        preds = " & ".join(_describe(p) for p in self.predicates) or "all"
        heads = "rest" if self.heads is None else ",".join(map(str, self.heads))
        score = "dot" if isinstance(self.score, DotScore) else f"feature-dot(k={self.score.k})"
        return f"heads[{heads}] layout={self.layout.value} mask={preds} score={score}"


def _describe(p: Predicate) -> str:
    if isinstance(p, Causal):
        return "k<q" if p.strict else "k<=q"
    return {Keep: "keep", SameBucket: "same-bucket", NotSelf: "k!=q"}[type(p)]


@dataclass(frozen=True, slots=True)
class Program:
    """A lowered spec: head groups plus the block sizes its index tensors are built for.

    ``block_q`` is the query-block height of the forward and dQ kernels (query blocks are
    split into bucket segments at this granularity); ``block_k`` the key-block height of the
    dK/dV kernel. The other side of each tile is free for the kernel to choose.
    """

    groups: tuple[HeadGroup, ...]
    block_q: int = 128
    block_k: int = 128

    def with_blocks(self, block_q: int, block_k: int) -> Program:
        return replace(self, block_q=block_q, block_k=block_k)

    def describe(self) -> str:
        return "\n".join(g.describe() for g in self.groups)
