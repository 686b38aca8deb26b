"""Planning: which backend runs each head group, and the stage graph that records it.

Every head group goes through decide -> layout -> ranges -> attend. Each backend says which
groups it cannot run and why (``not_supported_reasons``); ``backend="auto"`` walks the
device's candidates in priority order and takes the first with no reasons, a forced backend is
checked the same way, and when nothing qualifies the error lists every candidate with its
reasons. A backend that gathers and scatters rows itself contracts gather -> attend -> scatter
into one node of the graph; that contraction is a recorded fusion.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from ..backends import REGISTRY, Backend
from ..ir import AttentionInputs, HeadGroup, Program, resolve_heads

__all__ = ["AUTO_ORDER", "Assignment", "NoBackendError", "Plan", "make_plan"]

# candidates for backend="auto", in priority order, per device type
AUTO_ORDER: dict[str, tuple[str, ...]] = {
    "cuda": ("sdpa", "triton", "reference"),
    "cpu": ("reference",),
}


class NoBackendError(RuntimeError):
    """No backend (or not the forced one) can run a head group; the message says why."""


@dataclass(frozen=True)
class Assignment:
    """One head group, its resolved heads, the backend that runs it and those refused first."""

    group: HeadGroup
    heads: tuple[int, ...]
    backend: Backend
    refused: tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class Plan:
    """The chosen backends, the program lowered with their block sizes, and the stage graph."""

    program: Program
    assignments: tuple[Assignment, ...]
    graph: nx.DiGraph
    fusions: tuple[str, ...]

    def describe(self) -> str:
        lines = [f"blocks: block_q={self.program.block_q} block_k={self.program.block_k}"]
        for i, a in enumerate(self.assignments):
            lines.append(f"group {i}: {a.group.describe()} -> {a.backend.NAME} (heads {list(a.heads)})")
            stages = [n for n in nx.topological_sort(self.graph) if self.graph.nodes[n]["group"] == i]
            lines.append("  stages: " + " -> ".join(f"{n.split(':', 1)[1]}[{self.graph.nodes[n]['backend']}]" for n in stages))
            for name, reasons in a.refused:
                lines.append(f"  refused {name}: {'; '.join(reasons)}")
        if self.fusions:
            lines.append("fusions: " + "; ".join(self.fusions))
        return "\n".join(lines)


def _reasons(name: str, group: HeadGroup, inputs: AttentionInputs) -> list[str]:
    backend = REGISTRY.get(name)
    if backend is None:
        return [f"not available (registered: {sorted(REGISTRY)})"]
    return backend.not_supported_reasons(group, inputs)


def make_plan(program: Program, inputs: AttentionInputs, *, backend: str = "auto", has_decide: bool) -> Plan:
    """Assign a backend to every head group of ``program`` and build the stage graph."""
    if backend == "auto":
        order = AUTO_ORDER.get(inputs.device.type, ("reference",))
    else:
        order = (backend,)
    assignments = []
    for group, heads in zip(program.groups, resolve_heads(program, inputs.heads), strict=True):
        if not heads:
            continue
        refused = []
        for name in order:
            reasons = _reasons(name, group, inputs)
            if not reasons:
                assignments.append(Assignment(group, tuple(heads), REGISTRY[name], tuple(refused)))
                break
            refused.append((name, tuple(reasons)))
        else:
            detail = "\n".join(f"  {n}: {'; '.join(r)}" for n, r in refused)
            what = "no backend can" if backend == "auto" else f"backend {backend!r} cannot"
            raise NoBackendError(f"{what} run head group {group.describe()}:\n{detail}")
    prepared = [a.backend for a in assignments if a.backend.needs_prepare]
    if prepared:
        program = program.with_blocks(*prepared[0].blocks(inputs))
    graph, fusions = _stage_graph(assignments, has_decide)
    return Plan(program, tuple(assignments), graph, fusions)


def _stage_graph(assignments: list[Assignment], has_decide: bool) -> tuple[nx.DiGraph, tuple[str, ...]]:
    """decide -> layout -> ranges -> gather -> attend -> scatter per group, with the stages a
    backend runs as one kernel contracted into one node (each contraction is a fusion)."""
    graph = nx.DiGraph()
    fusions = []
    for i, a in enumerate(assignments):
        b = a.backend
        stages: list[tuple[str, str]] = [("decide", "torch")] if has_decide and a.group.heads is None else []
        if b.needs_prepare:
            stages += [("layout", "torch"), ("ranges", "torch"), ("gather", "torch"), ("attend", b.NAME), ("scatter", "torch")]
        else:
            stages.append(("attend", b.NAME))
        for s, backend in stages:
            graph.add_node(f"{i}:{s}", group=i, backend=backend)
        graph.add_edges_from(
            (f"{i}:{x}", f"{i}:{y}") for (x, _), (y, _) in zip(stages, stages[1:], strict=False)
        )
        if getattr(b, "FUSES_INDEX_BUILDING", False):
            graph = _contract(graph, i, ("layout", "ranges"), b.NAME)
            fusions.append(f"group {i}: layout+ranges in {b.NAME} kernels (sort keys, one sort, one block pass per side)")
        if getattr(b, "FUSES_GATHER_SCATTER", False):
            graph = _contract(graph, i, ("gather", "attend", "scatter"), b.NAME)
            fusions.append(f"group {i}: gather+attend+scatter in one {b.NAME} kernel (rows read and written through the layout's order)")
        elif b.needs_prepare:
            # a dense-math backend gathers nothing: its attend reads the index tensors itself
            graph = _contract(graph, i, ("gather", "attend", "scatter"), b.NAME, name="attend")
    return graph, tuple(fusions)


def _contract(graph: nx.DiGraph, group: int, stages: tuple[str, ...], backend: str, name: str | None = None) -> nx.DiGraph:
    """Merge a chain of a group's stages into one node named ``a+b+c`` (or ``name``)."""
    nodes = [f"{group}:{s}" for s in stages]
    keep = nodes[0]
    for n in nodes[1:]:
        graph = nx.contracted_nodes(graph, keep, n, self_loops=False)
    merged = f"{group}:{name or '+'.join(stages)}"
    graph = nx.relabel_nodes(graph, {keep: merged})
    graph.nodes[merged].pop("contraction", None)
    graph.nodes[merged]["backend"] = backend
    return graph
