"""Checks for backend authors: a backend's own index building against the IR's torch one."""

from __future__ import annotations

import torch

from ..ir import AttentionInputs, lower, prepare_group, resolve_heads

__all__ = ["INDEX_FIELDS", "assert_same_index_tensors"]

# the PreparedGroup tensors every index builder must reproduce bit for bit
INDEX_FIELDS = ("q_order", "q_pos", "q_bucket", "k_order", "k_pos", "k_bucket", "q_ranges", "q_nseg", "k_ranges", "k_nseg")


def assert_same_index_tensors(build, spec, dec, shape, *, causal: bool, blocks: tuple[int, int], device="cpu") -> None:
    """``build(program, group, heads, dec, inputs)`` (an index builder's ``build``; ``inputs`` of
    ``shape`` (B, H, T, D) on ``device``: a build reads only their sizes) gives, for every
    head group of ``spec`` lowered with ``blocks``, the tensors of :func:`tilesparse.ir.prepare_group`
    exactly (dtype, shape and values); raises naming the group, the tensor and the first index
    where they differ."""
    B, H, T, _ = shape
    device = torch.device(device)
    x = torch.zeros((), device=device).expand(shape)  # sizes only: no memory of that shape
    inputs = AttentionInputs(x, x, x, scale=1.0)
    program = lower(spec, causal=causal, block_q=blocks[0], block_k=blocks[1])
    for group, heads in zip(program.groups, resolve_heads(program, H), strict=True):
        if not heads:
            continue
        want = prepare_group(program, group, heads, dec, batch=B, heads=H, seqlen=T, device=device)
        got = build(program, group, heads, dec, inputs)
        for name in INDEX_FIELDS:
            a, b = getattr(want, name), getattr(got, name)
            if a.shape != b.shape or a.dtype != b.dtype:
                raise AssertionError(f"{group.describe()}: {name} is {b.dtype} {tuple(b.shape)}, want {a.dtype} {tuple(a.shape)}")
            if not torch.equal(a, b):
                where = (a != b).nonzero()[0].tolist()
                raise AssertionError(f"{group.describe()}: {name} differs first at {where}: {b[tuple(where)]} != {a[tuple(where)]}")
