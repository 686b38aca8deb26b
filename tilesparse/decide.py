"""The op's own decisions: the spec's criteria on q and k, with the built-in ``lsh`` criterion's
hashing given to the index builder that hashes faster than its torch ops.

The spec's parts decide in their order (``spec.decision_parts()``), drawing from the
generator exactly as ``spec.decide`` does. A ``Hash`` part with the built-in ``lsh``
criterion whose buckets an index builder hashes (:func:`tilesparse.backends.lsh_hasher`: on
CUDA the Triton builder's hashing kernel; without Triton the CuPy builder, up to the size where
its kernel stops beating torch's matmul) draws its rotation with the criterion's own
:func:`~tilesparse.patterns.criteria.lsh_draw`, and the builder rounds it to the inputs' dtype,
as the criterion does, and hashes: at once, or, when
the plan fuses the hashing into that builder's index build (``Assignment.fused_hash``), as part
of the build (a :class:`DeferredHash` the index step hands it). Either way the same kernel
hashes, so ``attn.decide`` and a fused call give the same buckets.

A ``TopKFeatures`` part with the built-in ``topk_abs`` criterion selects its supports in one
Triton launch on CUDA (:func:`tilesparse.backends.topk_selector`: the criterion exactly, each
kv head's keys selected once for its group), and with the criterion's torch ops elsewhere.

Other criteria get k per query head (a copy with grouped-query attention, made once a call),
except the built-in ``bernoulli``, which reads only k's length and gets k as it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .backends import HashingBuilder, IndexBuilder, lsh_hasher, topk_selector
from .ir import AttentionInputs
from .ir.hashing import LshHash
from .patterns import Decisions, Hash, SpecBase, TopKFeatures
from .patterns.criteria import bernoulli, get_criterion, lsh_draw, topk_abs

__all__ = ["DecideSetup", "DeferredHash", "decide_setup", "lsh_part", "make_decisions", "topk_part"]


@dataclass(frozen=True)
class DeferredHash:
    """``lsh`` buckets the decisions hold unfilled, for ``builder``'s fused index build."""

    builder: HashingBuilder
    lsh: LshHash


@dataclass(frozen=True)
class DecideSetup:
    """What a call's decisions take that its spec and its signature fix: the spec's ``lsh``
    and ``topk_abs`` parts, the builder that hashes the one (None: the criterion's torch ops)
    and the selector of the other (None: likewise). An eager call's bound decide step works it
    out once (``tilesparse.execute``); ``attn.decide`` anew each time."""

    part: Hash | None
    topk: TopKFeatures | None
    hasher: HashingBuilder | None
    selector: object


def decide_setup(spec: SpecBase, inputs: AttentionInputs) -> DecideSetup:
    """The :class:`DecideSetup` of ``spec`` on ``inputs``."""
    part, topk = lsh_part(spec), topk_part(spec)
    hasher = lsh_hasher(inputs, part.buckets) if part is not None else None
    return DecideSetup(part, topk, hasher, topk_selector(inputs) if topk is not None else None)


def lsh_part(spec: SpecBase) -> Hash | None:
    """The spec's ``Hash`` part that uses the built-in ``lsh`` criterion, if any."""
    return next((p for p in spec.decision_parts() if isinstance(p, Hash) and p.criterion == "lsh"), None)


def topk_part(spec: SpecBase) -> TopKFeatures | None:
    """The spec's ``TopKFeatures`` part that uses the built-in ``topk_abs`` criterion (not a
    criterion registered over its name), if any."""
    return next(
        (p for p in spec.decision_parts() if isinstance(p, TopKFeatures) and get_criterion(p.criterion).fn is topk_abs),
        None,
    )


def make_decisions(
    spec: SpecBase, inputs: AttentionInputs, generator, *, fused: IndexBuilder | None = None, check_ids: bool = True,
    setup: DecideSetup | None = None,
) -> tuple[Decisions, DeferredHash | None]:
    """The spec's decisions on ``inputs``; ``fused`` is the builder whose index build the plan
    lets hash the ``lsh`` buckets (then, when it is the hasher, they come back unfilled with
    the :class:`DeferredHash` for it); ``check_ids=False`` leaves a user criterion's ids to
    the caller; ``setup``: :func:`decide_setup` of ``spec`` on inputs of this signature (worked
    out here when not given)."""
    q = inputs.q
    setup = setup or decide_setup(spec, inputs)
    part, topk, hasher, selector = setup.part, setup.topk, setup.hasher, setup.selector
    out, deferred, k = Decisions(), None, None
    for p in spec.decision_parts():
        if p is topk and selector is not None:
            B, H, Tq, _ = q.shape
            q_support = torch.empty((B, H, Tq, p.k), dtype=torch.int32, device=q.device)
            k_support = torch.empty((B, H, inputs.k_len, p.k), dtype=torch.int32, device=q.device)
            selector(q, inputs.k, p.k, q_support, k_support)  # keys per kv head: no copy per query head
            out = out.merge(Decisions(q_support=q_support, k_support=k_support))
            continue
        if p is not part or hasher is None:
            if get_criterion(p.criterion).fn is bernoulli:
                part_k = inputs.k  # reads k's length alone: no copy per query head
            else:
                k = part_k = inputs.k_per_query_head() if k is None else k  # a copy with GQA: made once
            out = out.merge(p.decide(q, part_k, generator=generator, check_ids=check_ids))
            continue
        B, H, T, D = q.shape
        rotations = lsh_draw(H, D, p.buckets, q.device, generator)  # the hasher rounds it to q's dtype
        q_bucket, k_bucket = (torch.empty((B, H, T), dtype=torch.int32, device=q.device) for _ in range(2))
        lsh = LshHash(rotations, p.buckets, q_bucket, k_bucket)
        if hasher is fused:
            deferred = DeferredHash(hasher, lsh)
        else:
            hasher.hash(inputs, lsh)
        out = out.merge(Decisions(q_bucket=q_bucket, k_bucket=k_bucket))
    return out, deferred
