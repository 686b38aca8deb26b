"""Key padding and packed documents as exact predicates that AND with any pattern.

A call may pass a key-padding mask (B, Tk) bool, True for a real key, and document ids
(B, Tk) integers >= 0 (query i carries the id of key Tk - Tq + i, its own position). Element
(i, j) is then kept when the pattern keeps it AND key j is real AND i and j share a document.
A query row left with no kept key (e.g. a left-padded position under causality) outputs zeros
and gets zero gradient, as any empty row.

No kernel learns anything new: :func:`with_padding` rewrites the spec so that padding is a
key drop (a Keep predicate, QKDrop's) and documents are buckets (SameBucket, Hash's), and
:func:`padded_decisions` builds the matching decisions:

- key padding ANDs into ``k_keep`` (``q_keep`` all True where the pattern has no drop);
- document ids combine with bucket ids: ``bucket * n_docs + doc``, so equal combined ids mean
  the same bucket and the same document; layouts sort by it and the tiles between documents
  are never visited (block-diagonal, FlashAttention's varlen layout).

The rewrite keeps every other predicate (causality, attend_self=False) untouched, so the
result is exactly the pattern's mask ANDed with the two predicates; :func:`padding_mask_mod`
states that meaning independently, for the reference.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .decisions import Decisions
from .device_constants import device_constant
from .specs import Dense, Hash, Hybrid, MaskMod, PerHead, QKDrop, TopKFeatures, _Spec

__all__ = [
    "MAX_COMBINED_BUCKETS",
    "document_count",
    "document_count_of",
    "padded_decisions",
    "padding_mask_mod",
    "with_padding",
]

MAX_COMBINED_BUCKETS = 65536  # Hash's bucket limit: buckets * documents must fit


def document_count(document_ids: Tensor) -> int:
    """Documents to reserve ids for: max id + 1 rounded up to a power of two (so a stream of
    packed batches reuses a few compiled variants). Reads the ids back (one device sync)."""
    return document_count_of(int(document_ids.max()) if document_ids.numel() else 0)


def document_count_of(max_id: int) -> int:
    """Documents to reserve ids for when the largest id is ``max_id``: max_id + 1 rounded up to
    a power of two."""
    return 1 << max(0, max_id).bit_length()


def with_padding(spec: _Spec, *, key_padding: bool, documents: int) -> _Spec:
    """``spec`` rewritten so its decisions can carry key padding (a key drop) and ``documents``
    document ids (buckets); ``documents=1`` adds no document predicate."""
    if not key_padding and documents <= 1:
        return spec
    if isinstance(spec, PerHead):
        return _per_head(spec, key_padding=key_padding, documents=documents)
    parts = list(spec.parts) if isinstance(spec, Hybrid) else ([] if isinstance(spec, Dense) else [spec])
    drop = next((p for p in parts if isinstance(p, QKDrop)), None)
    bucket = next((p for p in parts if isinstance(p, Hash)), None)
    if key_padding and drop is None:
        parts.append(QKDrop(keep=1.0))
    if documents > 1:
        base = bucket.buckets if bucket is not None else 1
        if base * documents > MAX_COMBINED_BUCKETS:
            raise ValueError(
                f"document_ids: {documents} documents x {base} buckets = {base * documents} combined "
                f"buckets exceeds {MAX_COMBINED_BUCKETS}; use fewer documents per row"
            )
        if bucket is None:
            parts.append(Hash(buckets=documents))
        else:
            parts[parts.index(bucket)] = bucket.model_copy(update={"buckets": base * documents})
    if len(parts) == 1:
        return parts[0]
    order = {"qk_drop": 0, "hash": 1, "topk_features": 2}
    return Hybrid(parts=tuple(sorted(parts, key=lambda p: order[p.kind])))


def _per_head(spec: PerHead, *, key_padding: bool, documents: int) -> _Spec:
    """PerHead's dense heads ignore decisions, so padding them needs the rest's layout on every
    head with neutral decisions there; that is exact unless the rest changes the score or
    drops the diagonal, which dense heads must not."""
    rest = spec.rest.parts if isinstance(spec.rest, Hybrid) else (spec.rest,)
    if spec.dense_heads:
        if any(isinstance(p, TopKFeatures) for p in rest):
            raise ValueError(
                "key_padding_mask/document_ids with PerHead(dense_heads=..., rest=TopKFeatures...) is not "
                "supported: dense heads need every feature; use a spec without PerHead"
            )
        if any(isinstance(p, Hash) and not p.attend_self for p in rest):
            raise ValueError(
                "key_padding_mask/document_ids with PerHead(dense_heads=..., rest=Hash(attend_self=False)) is "
                "not supported: dense heads attend to themselves; use a spec without PerHead"
            )
    return with_padding(spec.rest, key_padding=key_padding, documents=documents)


def padded_decisions(
    spec: _Spec,
    padded: _Spec,
    dec: Decisions,
    *,
    key_padding_mask: Tensor | None,
    document_ids: Tensor | None,
    documents: int,
    heads: int,
    q_len: int,
) -> Decisions:
    """``dec`` (the decisions of ``spec``) turned into decisions of ``padded`` =
    ``with_padding(spec, ...)``, for ``heads`` query heads and ``q_len`` queries."""
    fields = dict(dec.items())
    if isinstance(spec, PerHead) and spec.dense_heads:  # dense heads: every token kept, one bucket
        dense = tuple(sorted(spec.dense_heads))
        for name, t in fields.items():
            if t is not None and name.endswith(("_keep", "_bucket")):
                # an index on the device, made once: a list or mask uploaded per call would wait
                index = device_constant(dense, torch.int64, t.device)
                fields[name] = t.index_fill(1, index, name.endswith("_keep"))
    need = padded.decision_fields
    like = document_ids if document_ids is not None else key_padding_mask
    B, Tk = like.shape
    dev = like.device
    if "q_keep" in need and fields.get("q_keep") is None:
        fields["q_keep"] = torch.ones((B, heads, q_len), dtype=torch.bool, device=dev)
        fields["k_keep"] = torch.ones((B, heads, Tk), dtype=torch.bool, device=dev)
    if key_padding_mask is not None:
        fields["k_keep"] = fields["k_keep"] & key_padding_mask[:, None, :]
    if documents > 1:
        kd = document_ids.to(torch.int32)[:, None, :].expand(B, heads, Tk)
        qd = kd[..., Tk - q_len :]
        if fields.get("q_bucket") is None:
            fields["q_bucket"], fields["k_bucket"] = qd.contiguous(), kd.contiguous()
        else:
            fields["q_bucket"] = fields["q_bucket"].to(torch.int32) * documents + qd
            fields["k_bucket"] = fields["k_bucket"].to(torch.int32) * documents + kd
    return Decisions(**{n: t for n, t in fields.items() if n in need})


def padding_mask_mod(key_padding_mask: Tensor | None, document_ids: Tensor | None, q_len: int) -> MaskMod | None:
    """(b, h, i, j) -> key j is real AND query i and key j share a document: the meaning of
    the two arguments, stated without the rewrite (the reference uses it)."""
    if key_padding_mask is None and document_ids is None:
        return None

    def mod(b, h, i, j):
        like = key_padding_mask if key_padding_mask is not None else document_ids
        out = torch.ones((), dtype=torch.bool, device=like.device)
        if key_padding_mask is not None:
            out = out & key_padding_mask[b, j]
        if document_ids is not None:
            Tk = document_ids.shape[1]
            out = out & (document_ids[b, i + (Tk - q_len)] == document_ids[b, j])
        return out

    return mod
