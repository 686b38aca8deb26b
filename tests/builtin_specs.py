"""Shared by the CPU and GPU tests that run over the built-in patterns: one spec of every kind,
sized by the test (a CPU test's T is small, so its bucket counts and kept features are too)."""

from __future__ import annotations

import tilesparse as ts


def one_of_each_kind(*, keep: float, buckets: int, k: int, hybrid_buckets: int | None = None, hybrid_keep: float = 0.7,
                     perhead_buckets: int | None = None, dense_head: int = 0) -> dict[str, ts.SpecBase]:
    """Dense, QKDrop(keep), Hash(buckets), TopKFeatures(k), a Hybrid of a Hash and a QKDrop, and
    a PerHead with one dense head and Hash on the rest, keyed by kind; the Hybrid's and the
    PerHead's buckets default to ``buckets``."""
    return {
        "dense": ts.Dense(),
        "qkdrop": ts.QKDrop(keep=keep),
        "hash": ts.Hash(buckets=buckets),
        "topk": ts.TopKFeatures(k=k),
        "hybrid": ts.Hybrid(parts=[ts.Hash(buckets=hybrid_buckets or buckets), ts.QKDrop(keep=hybrid_keep)]),
        "perhead": ts.PerHead(dense_heads=[dense_head], rest=ts.Hash(buckets=perhead_buckets or buckets)),
    }


def given_decisions(op: ts.CompiledAttention, q, k) -> ts.Decisions | None:
    """Fresh decisions of ``op``'s criteria as given ones (clones: untrusted, so every call
    checks their ids); None for a pattern without decisions."""
    fields = {n: t.clone() for n, t in op.decide(q, k).items() if t is not None}
    return ts.Decisions(**fields) if fields else None
