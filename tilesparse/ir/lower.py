"""Lowering: a pattern spec becomes an IR :class:`Program`.

One pass per spec kind; a Hybrid joins its parts' layouts and predicates, PerHead makes two
head groups. Causality is a compile option and becomes a Causal predicate in every group;
Hash(attend_self=False) adds NotSelf, which folds into Causal(strict=True) when causal.
"""

from __future__ import annotations

from ..patterns import Dense, Hash, Hybrid, PerHead, QKDrop, SpecBase, TopKFeatures
from .program import Causal, DotScore, FeatureDotScore, HeadGroup, Keep, Layout, NotSelf, Program, SameBucket

__all__ = ["lower"]


def lower(spec: SpecBase, *, causal: bool, block_q: int = 128, block_k: int = 128) -> Program:
    """The IR program of ``spec``."""
    if isinstance(spec, PerHead):
        groups: tuple[HeadGroup, ...] = (_group(spec.rest, causal, heads=None),)
        if spec.dense_heads:
            groups = (_group(Dense(), causal, heads=spec.dense_heads), *groups)
    else:
        groups = (_group(spec, causal, heads=None),)
    return Program(groups=groups, block_q=block_q, block_k=block_k)


def _group(spec: SpecBase, causal: bool, *, heads: tuple[int, ...] | None) -> HeadGroup:
    parts = spec.parts if isinstance(spec, Hybrid) else (spec,)
    compact = sort = not_self = False
    buckets, keep = 1, 1.0
    score = DotScore()
    preds: list = []
    for p in parts:
        if isinstance(p, QKDrop):
            compact, keep = True, p.keep
            preds.append(Keep())
        elif isinstance(p, Hash):
            sort, buckets = True, p.buckets
            preds.append(SameBucket())
            not_self = not p.attend_self
        elif isinstance(p, TopKFeatures):
            score = FeatureDotScore(k=p.k)
        elif not isinstance(p, Dense):
            raise TypeError(f"cannot lower spec kind {type(p).__name__}")
    if causal:
        preds.insert(0, Causal(strict=not_self))
    elif not_self:
        preds.append(NotSelf())
    return HeadGroup(
        heads=heads,
        layout=Layout.of(compact=compact, sort=sort),
        predicates=tuple(preds),
        score=score,
        buckets=buckets,
        keep=keep,
    )
