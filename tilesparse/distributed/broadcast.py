"""Every rank takes one rank's decisions: for a check against the single-process op, whose
criteria drew them once, or to run the sequence-parallel op on decisions made in one place."""

from __future__ import annotations

import torch

from ..patterns import Decisions

__all__ = ["broadcast_decisions"]


def broadcast_decisions(dec: Decisions, *, src: int = 0, group=None) -> Decisions:
    """Rank ``src``'s ``dec`` on every rank of ``group`` (default: the world). Every rank passes
    decisions with the same fields, shapes and dtypes (its own, e.g. from the same ``decide``
    call); bool fields travel as uint8 (a backend such as NCCL has no bool)."""
    import torch.distributed as dist

    fields = {}
    for name, t in dec.items():
        if t is None:
            continue
        wire = t.to(torch.uint8 if t.dtype == torch.bool else t.dtype).contiguous()
        dist.broadcast(wire, src=src, group=group)
        fields[name] = wire.bool() if t.dtype == torch.bool else wire
    return Decisions(**fields)
