"""The op's own decisions: the spec's criteria on q and k, with the built-in ``lsh`` criterion's
hashing given to the index builder that hashes faster than its torch ops.

The spec's parts decide in their order (``spec.decision_parts()``), drawing from the
generator exactly as ``spec.decide`` does. A ``Hash`` part with the built-in ``lsh``
criterion whose buckets an index builder hashes (:func:`tilesparse.backends.lsh_hasher`: on
CUDA the Triton builder's hashing kernel; without Triton the CuPy builder, up to the size where
its kernel stops beating torch's matmul) draws its rotation with the criterion's own
:func:`~tilesparse.patterns.criteria.lsh_rotation`, and the builder hashes: at once, or, when
the plan fuses the hashing into that builder's index build (``Assignment.fused_hash``), as part
of the build (a :class:`DeferredHash` the index step hands it). Either way the same kernel
hashes, so ``attn.decide`` and a fused call give the same buckets.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .backends import HashingBuilder, IndexBuilder, lsh_hasher
from .ir import AttentionInputs
from .ir.hashing import LshHash
from .patterns import Decisions, Hash, SpecBase
from .patterns.criteria import lsh_rotation

__all__ = ["DeferredHash", "lsh_part", "make_decisions"]


@dataclass(frozen=True)
class DeferredHash:
    """``lsh`` buckets the decisions hold unfilled, for ``builder``'s fused index build."""

    builder: HashingBuilder
    lsh: LshHash


def lsh_part(spec: SpecBase) -> Hash | None:
    """The spec's ``Hash`` part that uses the built-in ``lsh`` criterion, if any."""
    return next((p for p in spec.decision_parts() if isinstance(p, Hash) and p.criterion == "lsh"), None)


def make_decisions(
    spec: SpecBase, inputs: AttentionInputs, generator, *, fused: IndexBuilder | None = None, check_ids: bool = True
) -> tuple[Decisions, DeferredHash | None]:
    """The spec's decisions on ``inputs``; ``fused`` is the builder whose index build the plan
    lets hash the ``lsh`` buckets (then, when it is the hasher, they come back unfilled with
    the :class:`DeferredHash` for it); ``check_ids=False`` leaves a user criterion's ids to
    the caller."""
    q, k = inputs.q, inputs.k_per_query_head()
    part = lsh_part(spec)
    hasher = lsh_hasher(inputs, part.buckets) if part is not None else None
    out, deferred = Decisions(), None
    for p in spec.decision_parts():
        if p is not part or hasher is None:
            out = out.merge(p.decide(q, k, generator=generator, check_ids=check_ids))
            continue
        B, H, T, D = q.shape
        rotations = lsh_rotation(H, D, p.buckets, q.dtype, q.device, generator).float()
        q_bucket, k_bucket = (torch.empty((B, H, T), dtype=torch.int32, device=q.device) for _ in range(2))
        lsh = LshHash(rotations, p.buckets, q_bucket, k_bucket)
        if hasher is fused:
            deferred = DeferredHash(hasher, lsh)
        else:
            hasher.hash(inputs, lsh)
        out = out.merge(Decisions(q_bucket=q_bucket, k_bucket=k_bucket))
    return out, deferred
