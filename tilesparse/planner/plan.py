"""Planning: which attention backend and which index builder run each head group, by
estimated cost, and the stage graph.

Every head group goes through decide -> layout -> ranges -> attend (-> merge into the output
when the plan has several groups). For each group the planner

1. replaces the group by an exactly equivalent dense one when its mask is statically trivial
   (``simplify``): one hash bucket keeps every pair, a feature support of all D features is
   the plain dot. Only then may dense attention run a sparse spec: a high visited fraction
   alone never sends a drop or hash mask to dense attention, since that would change the
   result; the plan notes when dense attention would have been cheaper;
2. asks every candidate attention backend for its reasons not to run the group
   (``not_supported_reasons``, the single source of truth; a backend that reads index tensors
   runs only where its own index builder can build them, so that builder's reasons are its
   too); with ``backend="auto"`` every registered backend is a candidate, and one without a
   cost entry for the device is refused with that reason; a forced backend is checked the
   same way;
3. prices the others with the cost model (planner/cost.py: fixed + per visited tile, with the
   visited fraction estimated from the spec) and takes the cheapest; ties go to registration
   order. When nothing qualifies, the error lists every candidate with its reasons, in the
   format explain() uses for the refusals of a plan that succeeded.

Then, for a group whose backend reads index tensors, it picks the index builder
(``tilesparse.backends.BUILDERS``; ``layout`` and ``ranges``), priced separately by the index
lines of the cost model plus the host time a builder's launches add (``index_host``: CuPy's
launch path costs the host more than Triton's): the backend's own (``INDEX_BUILDER``: Triton's
kernels, CuPy's, or the IR's torch code) or, with ``backend="auto"``, any other registered
builder that can build the group and is cheaper. When the op makes the decisions itself with
the ``lsh`` criterion, the builder that hashes its buckets (``lsh_hasher``: Triton's hashing
kernel on CUDA; without Triton, CuPy where its kernel is faster than torch) may hash them as
part of its build (``fused_hash``: CuPy in its first launch, Triton in a launch before its
build), priced against the criterion's own launch plus another build where the cost model has a
line for it; a forced backend gets its own builder.

A backend's and a builder's stage chains (``FUSIONS``) are contracted into one node of the
graph each; every contraction is a recorded fusion. The graph's nodes, in a topological order, become the plan's
:class:`Step` list (decide; build each group's index; attend each group; merge): the call
executes exactly these steps (``tilesparse.execute``) and ``describe()`` prints them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import NamedTuple

import networkx as nx

from ..backends import BUILDERS, REGISTRY, Backend, IndexBuilder, lsh_hasher
from ..ir import (
    AttentionInputs,
    Causal,
    DotScore,
    FeatureDotScore,
    HeadGroup,
    Layout,
    NotSelf,
    Program,
    SameBucket,
    resolve_heads,
)
from .cost import CostTable, Shape, default_costs, estimate_visited

__all__ = [
    "Assignment", "NoBackendError", "Plan", "Step", "format_refusals", "make_plan", "plan_ms", "shape_of", "simplify",
]  # fmt: skip

# what a call does, in this order: the stage graph's stages each step covers
STEP_KINDS: dict[str, tuple[str, ...]] = {
    "decide": ("decide",),
    "index": ("layout", "ranges"),
    "attend": ("gather", "attend", "scatter"),
    "merge": ("merge",),
}


class NoBackendError(RuntimeError):
    """No backend (or not the forced one) can run a head group; the message says why."""


@dataclass(frozen=True)
class Assignment:
    """One head group as it runs, its heads, its backend, and how the choice was made.

    ``lowered`` is the group the spec lowered to when ``group`` is its exact simplification;
    ``costs`` the estimated ms of every backend that could run it, cheapest first; ``visited``
    the estimated fraction of dense tiles a tile-skipping kernel visits; ``notes`` what the
    planner wants a reader to know (simplifications, a cheaper dense plan it may not use);
    ``split`` the chosen backend's (host floor, work) estimate in ms; ``dense_heads`` the heads
    of a PerHead's dense group fused into this group's launch (run with one bucket and every
    token kept, which is exactly dense attention); ``builder`` the index builder (None when the
    backend reads no index tensors), ``fused_hash`` whether it hashes the op's ``lsh`` buckets
    in its build, ``index_costs`` the estimated ms of every builder compared (its index line
    and the host time its launches add), cheapest first, ``index_refused`` the other builders
    that cannot build the group, with their reasons.
    """

    group: HeadGroup
    heads: tuple[int, ...]
    backend: Backend
    refused: tuple[tuple[str, tuple[str, ...]], ...]
    costs: tuple[tuple[str, float], ...] = ()
    visited: float = 1.0
    notes: tuple[str, ...] = ()
    lowered: HeadGroup | None = None
    split: tuple[float, float] = (0.0, 0.0)
    dense_heads: tuple[int, ...] = ()
    builder: IndexBuilder | None = None
    fused_hash: bool = False
    index_costs: tuple[tuple[str, float], ...] = ()
    index_refused: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Step:
    """One step a call executes: ``kind`` is "decide" (make or check the decisions, once),
    "index" (build ``group``'s index tensors), "attend" (run ``group``'s backend) or "merge"
    (write every group's heads into the output); ``by`` names who runs it (an index builder,
    an attention backend, or "torch"); ``nodes`` are the stage-graph nodes it covers."""

    kind: str
    group: int | None
    by: str
    nodes: tuple[str, ...] = ()

    def describe(self) -> str:
        where = "" if self.group is None else f" group {self.group}"
        return f"{self.kind}{where}[{self.by}]"


@dataclass(frozen=True)
class Plan:
    """The chosen backends, the program lowered with their block sizes, the stage graph, and
    the steps a call executes (in an order of the graph)."""

    program: Program
    assignments: tuple[Assignment, ...]
    graph: nx.DiGraph
    fusions: tuple[str, ...]
    mode: str = "fwd"
    steps: tuple[Step, ...] = ()
    # the steps bound to each call signature a call has run them with (tilesparse.execute)
    bound: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def estimated_ms(self) -> float:
        return plan_ms(self.assignments)

    def describe(self) -> str:
        lines = [
            f"blocks: block_q={self.program.block_q} block_k={self.program.block_k}; "
            f"estimated {self.estimated_ms:.3g} ms a call ({self.mode})"
        ]
        for i, a in enumerate(self.assignments):
            dense = f", dense heads {list(a.dense_heads)} fused in" if a.dense_heads else ""
            lines.append(f"group {i}: {a.group.describe()} -> {a.backend.NAME} (heads {list(a.heads)}{dense})")
            stages = [n for n in nx.topological_sort(self.graph) if self.graph.nodes[n]["group"] == i]
            lines.append("  stages: " + " -> ".join(f"{n.split(':', 1)[1]}[{self.graph.nodes[n]['backend']}]" for n in stages))
            if a.costs:
                est = ", ".join(f"{n} {ms:.3g} ms" if ms < float("inf") else f"{n} not priced" for n, ms in a.costs)
                lines.append(f"  estimated: {est}; visited tiles {100 * a.visited:.1f}%")
            if a.builder is not None:
                fused = f" (hashes the lsh buckets {a.builder.HASHES})" if a.fused_hash else ""
                lines.append(f"  index builder: {a.builder.NAME}{fused}")
            if len(a.index_costs) > 1:
                est = ", ".join(f"{n} {ms:.3g} ms" for n, ms in a.index_costs)
                lines.append(f"  index build estimated: {est}")
            lines += [f"  note: {n}" for n in a.notes]
            lines += [f"  refused {line}" for line in format_refusals(a.refused)]
            lines += [f"  refused index builder {line}" for line in format_refusals(a.index_refused)]
        if self.fusions:
            lines.append("fusions: " + "; ".join(self.fusions))
        lines.append("steps, as a call runs them: " + " -> ".join(s.describe() for s in self.steps))
        return "\n".join(lines)


def plan_ms(assignments) -> float:
    """A plan's estimate: its calls' host floors and work overlap, so the larger sum."""
    return max(sum(a.split[0] for a in assignments), sum(a.split[1] for a in assignments))


def format_refusals(refused) -> list[str]:
    """``name: reason; reason`` per refused backend (errors and explain() share the format)."""
    return [f"{name}: {'; '.join(reasons)}" for name, reasons in refused]


def simplify(group: HeadGroup, head_dim: int) -> tuple[HeadGroup, str | None]:
    """The group with every predicate and score part that is true for any valid decisions
    removed, and what was removed (None when nothing was). Exact by construction: one bucket
    value means every kept pair shares it; k = D distinct features are all the features."""
    new, why = group, []
    if group.has(SameBucket) and group.buckets == 1:
        preds = tuple(p for p in group.predicates if not isinstance(p, SameBucket))
        new = replace(new, predicates=preds, layout=Layout.of(compact=group.layout.compacts, sort=False))
        why.append("one bucket: every pair shares it, so no sort and no bucket test")
    if isinstance(group.score, FeatureDotScore) and group.score.k >= head_dim:
        new = replace(new, score=DotScore())
        why.append(f"k={group.score.k} features of D={head_dim}: the plain dot")
    return new, ("; ".join(why) if why else None)


def shape_of(inputs: AttentionInputs, heads: int, causal: bool) -> Shape:
    mode = "fwd_bwd" if inputs.requires_grad else "fwd"
    return Shape(inputs.batch, heads, inputs.seqlen, inputs.head_dim, inputs.dtype, mode, causal)


def _reasons(name: str, group: HeadGroup, inputs: AttentionInputs) -> list[str]:
    """The backend's reasons, and its own index builder's (where that builder cannot build the
    group, the backend does not run it)."""
    backend = REGISTRY.get(name)
    if backend is None:
        return [f"not available (registered: {sorted(REGISTRY)})"]
    reasons = backend.not_supported_reasons(group, inputs)
    if backend.needs_prepare:
        reasons += [r for r in BUILDERS[backend.INDEX_BUILDER].not_supported_reasons(group, inputs) if r not in reasons]
    return reasons


def _candidates(backend: str) -> tuple[str, ...]:
    """The backends a plan may pick from: every registered one for ``auto``, else the forced one."""
    return tuple(REGISTRY) if backend == "auto" else (backend,)


@dataclass(frozen=True)
class _Choice:
    backend: Backend | None  # the cheapest, None when every candidate refused
    refused: tuple[tuple[str, tuple[str, ...]], ...]
    priced: tuple[tuple[str, float], ...]  # cheapest first
    split: tuple[float, float]  # the cheapest's (floor, work)
    visited: float


def _choose(
    group: HeadGroup,
    heads: tuple[int, ...],
    inputs: AttentionInputs,
    backend: str,
    costs: CostTable,
    visited: float | None = None,
    blocks: tuple[int, int] | None = None,
) -> _Choice:
    """Every candidate's reasons or price; ``visited`` overrides the spec's estimate; ``blocks``:
    the tile size of the program's index tensors (one per plan), which a backend reading index
    tensors must use."""
    names = _candidates(backend)
    shape = shape_of(inputs, len(heads), group.causal is not None)
    refused, priced, splits, fractions = [], [], {}, {}
    for name in names:
        reasons = _reasons(name, group, inputs)
        if blocks is not None and name in REGISTRY and REGISTRY[name].needs_prepare:
            if (own := REGISTRY[name].blocks(inputs)) != blocks:
                reasons.append(
                    f"its kernels need {own[0]}x{own[1]} tiles; this plan's index tensors are built for "
                    f"{blocks[0]}x{blocks[1]} (another head group's backend needs them)"
                )
        entry = costs.entry(inputs.device.type, name)
        if backend == "auto" and entry is None:
            reasons.append(
                f"no cost entry for {inputs.device.type} in the cost model (planner/costs.json); "
                f"backend={name!r} forces it"
            )
        if reasons:
            refused.append((name, tuple(reasons)))
            continue
        # the fraction depends on the tiles of the backend that would run it
        if visited is None:
            fractions[name] = estimate_visited(group, inputs.seqlen, *REGISTRY[name].blocks(inputs))
        else:
            fractions[name] = visited
        splits[name] = entry.split(shape, fractions[name]) if entry else (float("inf"), float("inf"))
        priced.append((name, max(splits[name])))
    order = {n: i for i, n in enumerate(names)}
    priced.sort(key=lambda p: (p[1], order[p[0]]))
    best = priced[0][0] if priced else None
    return _Choice(
        REGISTRY.get(best) if best else None, tuple(refused), tuple(priced), splits.get(best, (0.0, 0.0)),
        fractions.get(best, 1.0),
    )  # fmt: skip


def _dense_note(group: HeadGroup, heads, inputs, chosen: tuple[str, float], costs: CostTable) -> str | None:
    """Say so when dense attention would be cheaper than the sparse plan but is not exact."""
    causal = tuple(p for p in group.predicates if isinstance(p, Causal))
    dense = HeadGroup(group.heads, Layout.IDENTITY, causal, DotScore())
    if dense == group:
        return None
    alt = _choose(dense, heads, inputs, "auto", costs)
    if alt.backend is None or alt.priced[0][1] >= chosen[1]:
        return None
    return (
        f"dense attention ({alt.backend.NAME}, est. {alt.priced[0][1]:.3g} ms) would be cheaper than {chosen[0]} "
        f"(est. {chosen[1]:.3g} ms) but is not exact for this mask; the sparse plan runs"
    )


def _assign(
    program: Program, inputs: AttentionInputs, backend: str, costs: CostTable, blocks: tuple[int, int] | None = None
) -> tuple[list[Assignment], list[HeadGroup]]:
    """Every head group's cheapest backend (with ``blocks``: among those that read index
    tensors of that tile size, or none), and the groups as simplified."""
    assignments, groups = [], []
    for lowered, heads in zip(program.groups, resolve_heads(program, inputs.heads), strict=True):
        group, why = simplify(lowered, inputs.head_dim)
        groups.append(group)
        if not heads:
            continue
        c = _choose(group, tuple(heads), inputs, backend, costs, blocks=blocks)
        if c.backend is None:
            detail = "\n".join(f"  {line}" for line in format_refusals(c.refused))
            what = "no backend can" if backend == "auto" else f"backend {backend!r} cannot"
            raise NoBackendError(f"{what} run head group {group.describe()}:\n{detail}")
        notes = [f"simplified exactly from {lowered.describe()}: {why}"] if why else []
        if backend == "auto" and (note := _dense_note(group, tuple(heads), inputs, c.priced[0], costs)):
            notes.append(note)
        assignments.append(
            Assignment(group, tuple(heads), c.backend, c.refused, c.priced, c.visited, tuple(notes),
                       lowered if why else None, c.split)
        )  # fmt: skip
    return assignments, groups


def make_plan(
    program: Program,
    inputs: AttentionInputs,
    *,
    backend: str = "auto",
    has_decide: bool,
    lsh_decide: bool = False,
    costs: CostTable | None = None,
) -> Plan:
    """Assign an attention backend to every head group of ``program``, an index builder to
    every group whose backend reads index tensors, and build the stage graph. ``lsh_decide``: the op's decisions
    include buckets of the built-in ``lsh`` criterion (a builder may hash them itself)."""
    costs = costs or default_costs()
    assignments, groups = _assign(program, inputs, backend, costs)
    # the index tensors have one tile size per program: where the cheapest backends of two
    # groups want different ones, every size a backend reading index tensors wants is tried as
    # a constraint on all groups (those two first) and the cheapest plan that runs them all is kept
    wanted = list(dict.fromkeys(a.backend.blocks(inputs) for a in assignments if a.backend.needs_prepare))
    if len(wanted) > 1:
        candidates = [REGISTRY[n] for n in _candidates(backend)]
        sizes = dict.fromkeys([*wanted, *(b.blocks(inputs) for b in candidates if b.needs_prepare)])
        options, errors = [], []
        for blocks in sizes:
            try:
                options.append(_assign(program, inputs, backend, costs, blocks))
            except NoBackendError as e:
                errors.append(str(e))
        if not options:
            tried = ", ".join(f"{bq}x{bk}" for bq, bk in sizes)
            raise NoBackendError(f"the head groups' backends need different tiles and no one size ({tried}) runs "
                                 "every group:\n" + "\n".join(errors))  # fmt: skip
        assignments, groups = min(options, key=lambda o: plan_ms(o[0]))
    fused = _fuse_dense_heads(assignments, inputs, backend, costs)
    if fused is not None:
        assignments = [fused]
    assignments = [_choose_builder(a, inputs, backend, costs, has_decide and lsh_decide) for a in assignments]
    program = replace(program, groups=tuple(groups))  # as run: prepare() builds these groups
    prepared = [a.backend for a in assignments if a.backend.needs_prepare]
    if prepared:
        program = program.with_blocks(*prepared[0].blocks(inputs))
    graph, fusions = _stage_graph(assignments, has_decide)
    if fused is not None:
        fusions = (f"group 0: PerHead's dense heads {list(fused.dense_heads)} in the same launch as its rest", *fusions)
    mode = "fwd_bwd" if inputs.requires_grad else "fwd"
    return Plan(program, tuple(assignments), graph, fusions, mode, _steps(graph, assignments, inputs.heads))


def _steps(graph: nx.DiGraph, assignments: list[Assignment], heads: int) -> tuple[Step, ...]:
    """The graph's nodes as the steps a call runs: one decide (always first: given decisions
    are checked even when the spec makes none), every group's index build, every group's
    attend, one merge (unless one group holds every head). Each group's chain keeps its order, and groups are independent, so this
    is a topological order of the graph (``tests/planner/test_plan.py`` checks it)."""

    def nodes(i: int, kind: str) -> tuple[str, ...]:
        return tuple(
            n for n in nx.topological_sort(graph)
            if graph.nodes[n]["group"] == i and set(n.split(":", 1)[1].split("+")) & set(STEP_KINDS[kind])
        )  # fmt: skip

    decide = tuple(n for i in range(len(assignments)) for n in nodes(i, "decide"))
    by = {graph.nodes[n]["backend"] for n in decide}
    steps = [Step("decide", None, by.pop() if len(by) == 1 else "torch" if not by else "+".join(sorted(by)), decide)]
    for i, a in enumerate(assignments):
        if a.builder is not None:
            steps.append(Step("index", i, a.builder.NAME, nodes(i, "index")))
    steps += [Step("attend", i, a.backend.NAME, nodes(i, "attend")) for i, a in enumerate(assignments)]
    if len(assignments) != 1 or assignments[0].heads != tuple(range(heads)):
        steps.append(Step("merge", None, "torch", tuple(n for i in range(len(assignments)) for n in nodes(i, "merge"))))
    return tuple(steps)


def _fuse_dense_heads(assignments: list[Assignment], inputs, backend: str, costs: CostTable) -> Assignment | None:
    """PerHead's dense heads and its rest as one launch of the rest's backend, when that is
    cheaper than two: the dense heads run with one bucket and every token kept, which is
    exactly dense attention when the rest's mask adds only keep and same-bucket tests to the
    same causality (not for attend_self=False, nor for a feature-sparse score)."""
    if len(assignments) != 2:
        return None
    dense, rest = assignments
    if dense.group.heads is None or rest.group.heads is not None:
        return None
    g = rest.group
    same_causality = tuple(p for p in g.predicates if isinstance(p, Causal)) == dense.group.predicates
    if not same_causality or g.has(NotSelf) or not isinstance(g.score, DotScore):
        return None
    heads = tuple(range(inputs.heads))
    visited = (len(rest.heads) * rest.visited + len(dense.heads)) / inputs.heads
    c = _choose(g, heads, inputs, backend, costs, visited=visited)
    if c.backend is None or not c.backend.needs_prepare or max(c.split) >= plan_ms(assignments):
        return None
    note = (
        f"dense heads {list(dense.heads)} fused into this launch (est. {max(c.split):.3g} ms against "
        f"{plan_ms(assignments):.3g} ms for two calls): they run with one bucket and every token kept"
    )
    return replace(rest, heads=heads, backend=c.backend, refused=c.refused, costs=c.priced, visited=visited,
                   notes=(*rest.notes, note), split=c.split, dense_heads=dense.heads)  # fmt: skip


def _stage_graph(assignments: list[Assignment], has_decide: bool) -> tuple[nx.DiGraph, tuple[str, ...]]:
    """decide -> layout -> ranges -> gather -> attend -> scatter (-> merge) per group; each stage
    is run by the group's backend, its index builder, or torch code, and each chain in their
    FUSIONS whose stages they all run is contracted into one node (a recorded fusion)."""
    graph = nx.DiGraph()
    fusions = []
    for i, a in enumerate(assignments):
        b, ib = a.backend, a.builder
        stages: list[tuple[str, str]] = []
        if has_decide and a.group.heads is None:
            stages.append(("decide", ib.NAME if a.fused_hash else "torch"))
        if ib is not None:
            stages += [(s, ib.NAME if s in ib.STAGES else "torch") for s in ("layout", "ranges")]
            # a backend that reads rows through the index tensors gathers and scatters nothing
            stages += [(s, b.NAME) for s in ("gather", "attend", "scatter") if s in b.STAGES]
        else:
            stages.append(("attend", b.NAME))
        if len(assignments) > 1:
            stages.append(("merge", "torch"))  # the group's heads written into the output
        for s, who in stages:
            graph.add_node(f"{i}:{s}", group=i, backend=who)
        graph.add_edges_from((f"{i}:{x}", f"{i}:{y}") for (x, _), (y, _) in zip(stages, stages[1:], strict=False))
        merged: set[str] = set()
        for who in (ib, b) if ib is not None else (b,):
            for chain in who.FUSIONS:
                if all((s, who.NAME) in stages for s in chain) and not merged & set(chain):
                    graph = _contract(graph, i, chain, who.NAME)
                    merged |= set(chain)
                    fusions.append(f"group {i}: {'+'.join(chain)} fused in {who.NAME}")
    return graph, tuple(fusions)


class _BuildOption(NamedTuple):
    """One priced index builder: its index line's name and estimated ms, whether it hashes the
    ``lsh`` buckets itself, and the host ms its launches add beyond the Triton builder's."""

    name: str
    line_ms: float
    fuses: bool
    host_ms: float

    @property
    def price(self) -> float:
        # both counted (a conservative sum: where the call is bound by the GPU the host time
        # hides, and the lines differ by little there)
        return self.line_ms + self.host_ms


def _choose_builder(
    a: Assignment, inputs: AttentionInputs, backend: str, costs: CostTable, lsh_decide: bool
) -> Assignment:
    """Who builds the group's index tensors: the backend's own builder, or (``auto`` only)
    another registered builder that can build the group and whose index line is cheaper; the
    builder that hashes the op's ``lsh`` buckets may do it in its build's first launch."""
    if not a.backend.needs_prepare:
        return a
    own = BUILDERS[a.backend.INDEX_BUILDER]
    # the builder hashes every head into the decisions' buffers: a group of all heads only
    every_head = a.heads == tuple(range(inputs.heads)) and not a.dense_heads
    hashing = lsh_decide and a.group.has(SameBucket) and every_head
    hasher = lsh_hasher(inputs, a.group.buckets) if hashing else None
    rows = shape_of(inputs, len(a.heads), a.group.causal is not None).row_units
    dev = inputs.device.type

    def option(b: IndexBuilder) -> _BuildOption | None:
        """``b`` priced, or None where the cost model has no line for it."""
        fuses = b is hasher
        name = b.NAME + ("+lsh" if fuses else "")
        lines = [costs.index_line(dev, name)] + ([costs.index_line(dev, "lsh")] if hashing and not fuses else [])
        if any(line is None for line in lines):
            return None
        return _BuildOption(name, sum(line(rows) for line in lines), fuses, costs.index_host_ms(dev, b.NAME))

    if backend != "auto":
        return replace(a, builder=own, fused_hash=own is hasher)
    others = [(order, b) for order, b in enumerate(BUILDERS.values(), start=1) if b is not own and not b.OWN_ONLY]
    reasons = {b.NAME: tuple(b.not_supported_reasons(a.group, inputs)) for _, b in others}
    refused = tuple((n, r) for n, r in reasons.items() if r)
    own_option = option(own)
    if own_option is None:
        return replace(a, builder=own, fused_hash=own is hasher, index_refused=refused)
    priced = [(own_option, 0, own)]
    for order, b in others:
        if not reasons[b.NAME] and (o := option(b)) is not None:
            priced.append((o, order, b))
    priced.sort(key=lambda p: (p[0].price, p[1]))
    best, _, chosen = priced[0]
    # the build's estimate swapped in the work, its host time beyond the own builder's in the floor
    split = (a.split[0] + best.host_ms - own_option.host_ms, max(0.0, a.split[1] - own_option.line_ms + best.line_ms))
    return replace(a, builder=chosen, fused_hash=best.fuses, split=split, index_refused=refused,
                   index_costs=tuple((o.name, o.price) for o, _, _ in priced))  # fmt: skip


def _contract(graph: nx.DiGraph, group: int, stages: tuple[str, ...], backend: str) -> nx.DiGraph:
    """Merge a chain of a group's stages into one node named ``a+b+c``."""
    nodes = [f"{group}:{s}" for s in stages]
    keep = nodes[0]
    for n in nodes[1:]:
        graph = nx.contracted_nodes(graph, keep, n, self_loops=False)
    merged = f"{group}:{'+'.join(stages)}"
    graph = nx.relabel_nodes(graph, {keep: merged})
    graph.nodes[merged].pop("contraction", None)
    graph.nodes[merged]["backend"] = backend
    return graph

