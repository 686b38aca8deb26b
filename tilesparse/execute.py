"""Executing a plan: the call runs ``plan.steps`` in order, nothing else.

``decide`` makes the decisions (or checks the given ones); ``index`` builds a group's index
tensors with the group's index builder; ``attend`` runs the group's attention backend on them
(a backend that reads no index tensors attends the group's heads directly); ``merge`` writes
every group's heads into one output. When the call makes its own decisions and the plan lets
a group's builder hash the ``lsh`` buckets inside its build (``Assignment.fused_hash``), the
decide step leaves them unfilled (``tilesparse.decide``) and that group's index step fills
them in the build's first launch; any other build hashes them first. The eager call and the
``torch.compile`` custom op (``tilesparse.library``) both come here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torch import Tensor

from .backends import IndexBuilder
from .decide import DeferredHash
from .ir import AttentionInputs, PreparedGroup
from .ir.prepare import head_index
from .patterns import Decisions
from .planner import Plan, Step
from .planner.plan import STEP_KINDS

__all__ = ["Execution", "execute", "with_dense_heads"]


@dataclass
class Execution:
    """What the steps produced: the decisions (and their ``lsh`` buckets while a fused build
    has yet to hash them), each group's index tensors (None for a group that reads none), each
    group's output, and the call's output."""

    decisions: Decisions | None = None
    deferred: DeferredHash | None = None
    prepared: list[PreparedGroup | None] = field(default_factory=list)
    outputs: list[Tensor | None] = field(default_factory=list)
    out: Tensor | None = None


# the decide step's work: given the builder whose build may hash the lsh buckets (or None),
# the decisions and, when that builder is to hash them, the buckets it fills
Decide = Callable[[IndexBuilder | None], tuple[Decisions, DeferredHash | None]]


def execute(plan: Plan, inputs: AttentionInputs, decide: Decide, *, until: str | None = None) -> Execution:
    """Run ``plan.steps`` on ``inputs``; ``decide`` makes or checks the decisions. ``until``:
    run only the steps up to that kind (``"index"``: the decisions and the index tensors, for
    ``prepare``)."""
    n = len(plan.assignments)
    ex = Execution(prepared=[None] * n, outputs=[None] * n)
    kinds = list(STEP_KINDS)
    for step in plan.steps:
        if until is None or kinds.index(step.kind) <= kinds.index(until):
            _STEPS[step.kind](plan, step, inputs, ex, decide)
    _hash_deferred(ex, inputs)  # buckets no step hashed (none read them) are still the call's
    return ex


def _decide(plan, step: Step, inputs, ex: Execution, decide: Decide) -> None:
    fused = next((a.builder for a in plan.assignments if a.fused_hash), None)
    ex.decisions, ex.deferred = decide(fused)


def _index(plan, step: Step, inputs, ex: Execution, decide: Decide) -> None:
    a = plan.assignments[step.group]
    if ex.deferred is not None and a.fused_hash:
        lsh, ex.deferred = ex.deferred.lsh, None
        ex.prepared[step.group] = a.builder.build_hashing(plan.program, a.group, a.heads, ex.decisions, inputs, lsh)
        return
    _hash_deferred(ex, inputs)  # the buckets this build reads, hashed first
    dec = with_dense_heads(ex.decisions, a.dense_heads)
    ex.prepared[step.group] = a.builder.build(plan.program, a.group, a.heads, dec, inputs)


def _hash_deferred(ex: Execution, inputs: AttentionInputs) -> None:
    if ex.deferred is not None:
        ex.deferred.builder.hash(inputs, ex.deferred.lsh)
        ex.deferred = None


def _attend(plan, step: Step, inputs, ex: Execution, decide: Decide) -> None:
    a = plan.assignments[step.group]
    g = ex.prepared[step.group]
    if g is not None:
        ex.outputs[step.group] = a.backend.attend(g, inputs)
    else:
        ex.outputs[step.group] = a.backend.attend_heads(a.group, a.heads, inputs, decisions=ex.decisions)
    if len(plan.assignments) == 1 and a.heads == tuple(range(inputs.heads)):
        ex.out = ex.outputs[step.group]  # one group of every head: its output is the call's


def _merge(plan, step: Step, inputs, ex: Execution, decide: Decide) -> None:
    out = inputs.q.new_empty(inputs.q.shape)
    for a, o in zip(plan.assignments, ex.outputs, strict=True):
        out.index_copy_(1, head_index(a.heads, out.device), o)  # a cached index: no upload per call
    ex.out = out


_STEPS = {"decide": _decide, "index": _index, "attend": _attend, "merge": _merge}


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

