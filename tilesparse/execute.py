"""Executing a plan: the call runs ``plan.steps`` in order, nothing else.

``decide`` makes the decisions (or checks the given ones); ``index`` builds a group's index
tensors with the group's index builder; ``attend`` runs the group's attention backend on them
(a backend that reads no index tensors attends the group's heads directly); ``merge`` writes
every group's heads into one output. When the call makes its own decisions and the plan lets
a group's builder hash the ``lsh`` buckets inside its build (``Assignment.fused_hash``), the
decide step leaves them unfilled (``tilesparse.decide``) and that group's index step fills
them in the build's first launch; any other build hashes them first. Given ids checked on the
device leave the call a poison (NaN where one was out of range, else 1: decision_errors): where
every group's backend folds it into its output and gradients (``Backend.FOLDS_POISON``), each
attend step hands it over, and otherwise the call multiplies its output by it. The
eager call, a CUDA graph's capture and the ``torch.compile`` custom op (``tilesparse.library``)
all come here.

The steps are bound per call signature (the sizes of q, k and v, and the scale; a plan is
already one dtype, device and gradient mode): each index builder and attention backend works
out there what every call of that signature shares (``IndexBuilder.bind``, ``Backend.bind``:
buffer layouts, grids, launch constants). A signature's bound steps are kept from its second
call on, and its later calls run them: the plan's steps in the plan's order.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from torch import Tensor

from .backends import IndexBuilder
from .backends.switch import switched_on
from .decide import DeferredHash
from .ir import AttentionInputs, PreparedGroup
from .ir.prepare import head_index
from .patterns import Decisions
from .planner import Plan, Step
from .planner.plan import STEP_KINDS

__all__ = [
    "Execution", "bound_steps", "execute", "filled_dense_heads", "keep_from_second_call", "unfolded_poison",
    "with_dense_heads",
]


@dataclass
class Execution:
    """What the steps produced: the decisions (and their ``lsh`` buckets while a fused build
    has yet to hash them), each group's index tensors (None for a group that reads none), each
    group's output, and the call's output. ``poison``: where the decide step puts the call's
    poison (given ids checked on the device: decision_errors); ``folded``: whether the attend
    steps folded it into the call's output (a plan whose every group's backend folds it into
    that group's heads: ``Backend.FOLDS_POISON``), else the caller multiplies the output by it."""

    decisions: Decisions | None = None
    deferred: DeferredHash | None = None
    prepared: list[PreparedGroup | None] = field(default_factory=list)
    outputs: list[Tensor | None] = field(default_factory=list)
    out: Tensor | None = None
    poison: list[Tensor] = field(default_factory=list)
    folded: bool = False


# the decide step's work: given the builder whose build may hash the lsh buckets (or None) and
# the bound step's memo (a dict for what the decisions of every call of its signature share),
# the decisions and, when that builder is to hash them, the buckets it fills
Decide = Callable[[IndexBuilder | None, dict], tuple[Decisions, DeferredHash | None]]
# a bound step: runs on the call's inputs, filling the execution
BoundStep = Callable[[AttentionInputs, Execution, Decide], None]

_BOUND_SIGNATURES = 32  # signatures kept per plan (sizes that change every call rebind every call)
_UNFOLDED = [False]  # unfolded_poison() in force
_FILLED = [False]  # filled_dense_heads() in force


def unfolded_poison() -> contextlib.AbstractContextManager[None]:
    """Inside the block no attend step folds the call's poison into its output: the call
    multiplies the output by it, as before ``Backend.FOLDS_POISON`` (to A/B time the two)."""
    return switched_on(_UNFOLDED)


def filled_dense_heads() -> contextlib.AbstractContextManager[None]:
    """Inside the block a PerHead's dense heads fused into a group are built from decisions
    filled every call (:func:`with_dense_heads`, two copies and fills a call), as before their
    builder built them itself (``IndexBuilder.binds_dense_heads``: to A/B time the two)."""
    return switched_on(_FILLED)


def execute(
    plan: Plan, inputs: AttentionInputs, decide: Decide, *, until: str | None = None, poison: list | None = None
) -> Execution:
    """Run ``plan.steps`` on ``inputs``, bound to their signature (:func:`bound_steps`);
    ``decide`` makes or checks the decisions. ``until``: run only the steps up to that kind
    (``"index"``: the decisions and the index tensors, for ``prepare``). ``poison``: the list
    ``decide`` puts the call's poison in (:class:`Execution`)."""
    n = len(plan.assignments)
    ex = Execution(prepared=[None] * n, outputs=[None] * n, poison=[] if poison is None else poison)
    last = None if until is None else list(STEP_KINDS).index(until)
    for order, run in bound_steps(plan, inputs):
        if last is None or order <= last:
            run(inputs, ex, decide)
    _hash_deferred(ex, inputs)  # buckets no step hashed (none read them) are still the call's
    return ex


def bound_steps(plan: Plan, inputs: AttentionInputs) -> tuple[tuple[int, BoundStep], ...]:
    """``plan.steps`` bound to the signature of ``inputs``, each with its kind's rank in
    :data:`~tilesparse.planner.plan.STEP_KINDS`. A signature's binding is kept from its second
    call on: calls whose sizes change every time (a decode loop's growing keys) bind each time,
    as cheaply as before, and leave nothing behind for the garbage collector to walk."""
    q, k, v = inputs.q, inputs.k, inputs.v
    key = (q.shape, k.shape, v.shape, inputs.scale)
    steps = plan.bound.get(key)
    if steps is None:
        kinds = list(STEP_KINDS)
        steps = tuple((kinds.index(s.kind), _BIND[s.kind](plan, s, inputs)) for s in plan.steps)
        keep_from_second_call(plan.bound, key, steps, _BOUND_SIGNATURES)
    return steps


def keep_from_second_call(cache: dict, key, value, most: int) -> None:
    """Store ``value`` under ``key`` if ``key`` was seen before, else mark it seen (None): what
    a signature seen once leaves is one key, for the garbage collector to pass over. ``cache``
    is emptied once it holds ``most`` keys."""
    if len(cache) >= most:
        cache.clear()
    cache[key] = value if key in cache else None


def _bind_decide(plan: Plan, step: Step, inputs: AttentionInputs) -> BoundStep:
    fused = next((a.builder for a in plan.assignments if a.fused_hash), None)
    memo: dict = {}

    def run(inputs, ex: Execution, decide: Decide) -> None:
        ex.decisions, ex.deferred = decide(fused, memo)

    return run


def _bind_index(plan: Plan, step: Step, inputs: AttentionInputs) -> BoundStep:
    i = step.group
    a = plan.assignments[i]
    # a PerHead's dense heads fused into the group: built so by the builder where it can, else
    # their decisions filled so every call (with_dense_heads)
    native = bool(a.dense_heads) and a.builder.binds_dense_heads(inputs)
    build = a.builder.bind(plan.program, a.group, a.heads, inputs, **({"dense_heads": a.dense_heads} if native else {}))
    filled: list = []  # the build of filled decisions, bound on first use (filled_dense_heads())
    # the build that hashes the call's buckets first, bound likewise (decisions made in the call)
    build_hashing = a.builder.bind_hashing(plan.program, a.group, a.heads, inputs) if a.fused_hash else None

    def run(inputs, ex: Execution, decide: Decide) -> None:
        if ex.deferred is not None and build_hashing is not None:
            lsh, ex.deferred = ex.deferred.lsh, None
            ex.prepared[i] = build_hashing(ex.decisions, inputs, lsh)
            return
        _hash_deferred(ex, inputs)  # the buckets this build reads, hashed first
        if native and _FILLED[0]:
            if not filled:
                filled.append(a.builder.bind(plan.program, a.group, a.heads, inputs))
            ex.prepared[i] = filled[0](with_dense_heads(ex.decisions, a.dense_heads), inputs)
        else:
            ex.prepared[i] = build(ex.decisions if native else with_dense_heads(ex.decisions, a.dense_heads), inputs)

    return run


def _hash_deferred(ex: Execution, inputs: AttentionInputs) -> None:
    if ex.deferred is not None:
        ex.deferred.builder.hash(inputs, ex.deferred.lsh)
        ex.deferred = None


def _bind_attend(plan: Plan, step: Step, inputs: AttentionInputs) -> BoundStep:
    i = step.group
    a = plan.assignments[i]
    if a.backend.needs_prepare:
        # a backend whose bind takes no dense_heads still binds plans that fuse none
        attend = a.backend.bind(a.group, a.heads, inputs, **({"dense_heads": a.dense_heads} if a.dense_heads else {}))
    else:  # no index step: it attends from the decisions (sdpa: TopKFeatures' supports)
        attend_heads = a.backend.bind_heads(a.group, a.heads, inputs)
    whole = len(plan.assignments) == 1 and a.heads == tuple(range(inputs.heads))  # its output is the call's
    # every group folds the poison into its heads' output (so every head of the call's has it)
    fold = all(b.backend.FOLDS_POISON and b.backend.needs_prepare for b in plan.assignments)

    def run(inputs, ex: Execution, decide: Decide) -> None:
        g = ex.prepared[i]  # None exactly where the backend prepares nothing (no index step)
        if g is None:
            out = attend_heads(inputs, decisions=ex.decisions)
        elif fold and ex.poison and not _UNFOLDED[0]:
            out = attend(g, inputs, poison=ex.poison[0])
            ex.folded = True
        else:
            out = attend(g, inputs)
        ex.outputs[i] = out
        if whole:
            ex.out = out

    return run


def _bind_merge(plan: Plan, step: Step, inputs: AttentionInputs) -> BoundStep:
    def run(inputs, ex: Execution, decide: Decide) -> None:
        out = inputs.q.new_empty(inputs.q.shape)
        for a, o in zip(plan.assignments, ex.outputs, strict=True):
            out.index_copy_(1, head_index(a.heads, out.device), o)  # a cached index: no upload per call
        ex.out = out

    return run


_BIND = {"decide": _bind_decide, "index": _bind_index, "attend": _bind_attend, "merge": _bind_merge}


def with_dense_heads(dec: Decisions, heads: tuple[int, ...]) -> Decisions:
    """``dec`` with every token kept and in bucket 0 on ``heads``: a keep and same-bucket mask
    that is exactly dense attention there (the planner fuses PerHead's dense heads this way)."""
    if not heads:
        return dec
    fields = {}
    for name, t in dec.items():
        if t is not None and name.endswith(("_keep", "_bucket")):
            # True for keep, 0 for bucket; a cached device index, not a list uploaded per call
            t = t.index_fill(1, head_index(heads, t.device), name.endswith("_keep"))
        fields[name] = t
    return Decisions(**fields).trusted(None)
