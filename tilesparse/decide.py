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

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .backends import HashingBuilder, IndexBuilder, lsh_hasher, topk_selector
from .backends.switch import switched_on
from .ir import AttentionInputs
from .ir.hashing import LshHash
from .patterns import Decisions, Hash, SpecBase, TopKFeatures
from .patterns.criteria import bernoulli, get_criterion, lsh_draw, topk_abs

__all__ = [
    "BoundDecide", "DecideSetup", "DeferredHash", "bind_decisions", "decide_setup", "lsh_part", "make_decisions",
    "topk_part", "unbound_decide",
]


@dataclass(frozen=True)
class DeferredHash:
    """``lsh`` buckets the decisions hold unfilled, for ``builder``'s fused index build."""

    builder: HashingBuilder
    lsh: LshHash


@dataclass(frozen=True)
class DecideSetup:
    """What a call's decisions take that its spec and its signature fix: the spec's ``lsh``
    and ``topk_abs`` parts, the builder that hashes the one (None: the criterion's torch ops)
    and the selector of the other (None: likewise). :func:`bind_decisions` works it out: once
    per signature for an eager call's bound decide step (``tilesparse.execute``), anew for each
    ``attn.decide``."""

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
) -> tuple[Decisions, DeferredHash | None]:
    """The spec's decisions on ``inputs``; ``fused`` is the builder whose index build the plan
    lets hash the ``lsh`` buckets (then, when it is the hasher, they come back unfilled with
    the :class:`DeferredHash` for it); ``check_ids=False`` leaves a user criterion's ids to
    the caller. :func:`bind_decisions` worked out anew: a changed registry reaches it."""
    return bind_decisions(spec, inputs, check_ids=check_ids)(inputs, generator, fused)


BoundDecide = Callable[[AttentionInputs, object, "IndexBuilder | None"], tuple[Decisions, "DeferredHash | None"]]
Fields = dict[str, Tensor]


def bind_decisions(
    spec: SpecBase, inputs: AttentionInputs, *, check_ids: bool = True, in_call: bool = False
) -> BoundDecide:
    """:func:`make_decisions` for calls with the signature of ``inputs`` (shapes, dtype,
    device), as ``decide(inputs, generator, fused)``: the hasher, the selector, each part's
    criterion and its fields are worked out here, once, and a call runs one step per part
    (an eager call's bound decide step keeps it, ``tilesparse.execute``). The draws are those
    of ``spec.decide``, part by part in order. A built-in criterion's output is not checked per
    call (its shapes hold by construction, as its values already were not read back); a
    user criterion's is, as ``spec.decide`` checks it. ``in_call``: the decisions never leave
    the call (an eager call's own), so the built-in ``bernoulli``'s two sides may be views of
    one comparison (outside a call they are two tensors: a custom op's outputs may not alias)."""
    if unbound_decide_on():
        return _unbound(spec, inputs, check_ids)
    setup = decide_setup(spec, inputs)
    steps: list = []
    for p in spec.decision_parts():
        step, reads_copy = _part_step(p, setup, inputs, check_ids, in_call)
        if reads_copy and _copy_k not in steps:  # k per query head: one copy a call, made first
            steps.insert(0, _copy_k)
        steps.append(step)

    def decide(inputs: AttentionInputs, generator, fused: IndexBuilder | None = None):
        fields: Fields = {}
        deferred = None
        with torch.no_grad():  # decisions are not differentiable
            for step in steps:
                deferred = step(inputs, generator, fused, fields) or deferred
        fields.pop(_K, None)
        return Decisions(**fields), deferred

    return decide


_K = "_k_per_query_head"  # the call's copy of k per query head, while its steps run


def _copy_k(inputs: AttentionInputs, generator, fused, fields: Fields) -> None:
    fields[_K] = inputs.k_per_query_head()


def _part_step(
    p, setup: DecideSetup, inputs: AttentionInputs, check_ids: bool, in_call: bool
) -> tuple[Callable, bool]:
    """One part's step, ``step(inputs, generator, fused, fields)``: it sets the part's two fields
    in ``fields`` and returns a :class:`DeferredHash` or None; and whether it reads the call's
    copy of k per query head (other criteria than the built-in ``bernoulli``, which reads k's
    length alone, and the hasher and selector, which read the kv heads)."""
    B, H, Tq, D = inputs.q.shape
    Tk, device = inputs.k_len, inputs.device
    if p is setup.topk and setup.selector is not None:
        selector, q_shape, k_shape = setup.selector, (B, H, Tq, p.k), (B, H, Tk, p.k)

        def topk(inputs, generator, fused, fields):
            fields["q_support"] = torch.empty(q_shape, dtype=torch.int32, device=device)
            fields["k_support"] = torch.empty(k_shape, dtype=torch.int32, device=device)
            selector(inputs.q, inputs.k, p.k, fields["q_support"], fields["k_support"])  # keys per kv head

        return topk, False
    if p is setup.part and setup.hasher is not None:
        hasher, buckets = setup.hasher, p.buckets

        def hashed(inputs, generator, fused, fields):
            rotations = lsh_draw(H, D, buckets, device, generator)  # the hasher rounds it to q's dtype
            q_bucket = fields["q_bucket"] = torch.empty((B, H, Tq), dtype=torch.int32, device=device)
            k_bucket = fields["k_bucket"] = torch.empty((B, H, Tk), dtype=torch.int32, device=device)
            lsh = LshHash(rotations, buckets, q_bucket, k_bucket)
            if hasher is fused:
                return DeferredHash(hasher, lsh)
            hasher.hash(inputs, lsh)
            return None

        return hashed, False
    crit = get_criterion(p.criterion)
    if crit.fn is bernoulli and in_call:  # the built-in's draw, its comparison made once
        keep, n_q, n_k = p.keep, B * H * Tq, B * H * Tk

        def drop(inputs, generator, fused, fields):
            kept = torch.rand((n_q + n_k,), generator=generator, device=device) < keep
            fields["q_keep"], fields["k_keep"] = kept[:n_q].view(B, H, Tq), kept[n_q:].view(B, H, Tk)

        return drop, False
    kwargs = {n: getattr(p, n) for n in p.criterion_fields}
    q_name, k_name = f"q_{p.produces}", f"k_{p.produces}"
    own_k = crit.fn is bernoulli  # reads k's length alone: no copy per query head

    def criterion(inputs, generator, fused, fields):
        k = inputs.k if own_k else fields[_K]
        if crit.builtin:
            fields[q_name], fields[k_name] = crit.fn(inputs.q, k, generator=generator, **kwargs)
        else:
            fields[q_name], fields[k_name] = crit(inputs.q, k, generator=generator, check_ids=check_ids, **kwargs)

    return criterion, not own_k


_UNBOUND = [False]  # unbound_decide() in force


def unbound_decide():
    """While active, decisions are made as before :func:`bind_decisions` (each part through
    ``spec.decide`` and merged, its setup worked out once a signature, the decisions marked
    trusted): for A/B timing."""
    return switched_on(_UNBOUND)


def unbound_decide_on() -> bool:
    return _UNBOUND[0]


def _unbound(spec: SpecBase, inputs: AttentionInputs, check_ids: bool) -> BoundDecide:
    """The path before :func:`bind_decisions`: every criterion through ``spec.decide`` (its
    output checked, k copied per query head where read), the parts merged one by one; the
    selector's and the hasher's steps as bound (they did the same work)."""
    setup = decide_setup(spec, inputs)  # the one thing bound before bind_decisions
    kernels = {id(p): _part_step(p, setup, inputs, check_ids, False)[0] for p in spec.decision_parts()
               if (p is setup.topk and setup.selector is not None) or (p is setup.part and setup.hasher is not None)}

    def decide(inputs: AttentionInputs, generator, fused: IndexBuilder | None = None):
        out, deferred, k = Decisions(), None, None
        with torch.no_grad():
            for p in spec.decision_parts():
                step = kernels.get(id(p))
                if step is not None:
                    fields: Fields = {}
                    deferred = step(inputs, generator, fused, fields) or deferred
                    out = out.merge(Decisions(**fields))
                    continue
                if get_criterion(p.criterion).fn is bernoulli:
                    part_k = inputs.k
                else:
                    k = part_k = inputs.k_per_query_head() if k is None else k
                out = out.merge(p.decide(inputs.q, part_k, generator=generator, check_ids=check_ids))
        return out, deferred

    return decide
