"""Given ids checked on the device in one launch per field (``validate=True`` on a GPU).

:func:`tilesparse.patterns.decision_errors.check_on_device` defines the check: clamp the ids
into [0, bound) for the index build, fold their smallest and largest value into the op's error
record, and make the call's poison NaN when any id is out of range. As torch ops that is about
fifteen small launches a call, each a few to tens of microseconds of host time; this kernel does
one field's part in one launch:

- every program clamps its block of ids into the output and folds its block's minimum and
  maximum into the record row and into a scratch row (atomics);
- the last program to finish (a counter in the scratch row) reads the scratch row's extremes,
  resets the row for the next call (so a CUDA graph replay finds it reset too) and writes the
  call's poison: NaN when the field's ids leave [0, bound), else 1, or the poison of the
  field checked before it in this call (``FIRST`` false), so one 0-d tensor covers every field.

The record and scratch rows outlive the call (the op's :class:`DeviceErrors`); the poison is
the call's own. Two calls of one op on two streams at once would share the scratch row: the
op's calls are expected in stream order, as its error record already assumes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from .launch import lean

__all__ = ["BLOCK", "check_range_into"]

BLOCK = 1024  # ids per program
_MAX_DIMS = 4
_I64_MAX = torch.iinfo(torch.int64).max
_I64_MIN = torch.iinfo(torch.int64).min


@triton.jit
def _check_range(X, OUT, RECORD, SCRATCH, POISON,
                 n, size1, size2, size3, stride0, stride1, stride2, stride3, bound, n_programs, lo_init, hi_init,
                 FIRST: tl.constexpr, BLOCK: tl.constexpr):
    """Ids [pid * BLOCK, (pid + 1) * BLOCK) of X (up to 4-D, any strides; row-major order)
    clamped into the contiguous OUT; RECORD and SCRATCH's [min, max] folded; the last program
    writes POISON."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    in_range = offs < n
    # lanes past the end read the last id again: the block's extremes need no sentinel
    i = tl.minimum(offs, n - 1).to(tl.int64)
    i3 = i % size3
    i2 = (i // size3) % size2
    i1 = (i // (size3 * size2)) % size1
    i0 = i // (size3 * size2 * size1)
    x = tl.load(X + i0 * stride0 + i1 * stride1 + i2 * stride2 + i3 * stride3).to(tl.int64)
    tl.store(OUT + offs, tl.minimum(tl.maximum(x, 0), bound - 1).to(OUT.dtype.element_ty), mask=in_range)
    lo = tl.min(x, 0)
    hi = tl.max(x, 0)
    tl.atomic_min(RECORD, lo)
    tl.atomic_max(RECORD + 1, hi)
    tl.atomic_min(SCRATCH, lo)
    tl.atomic_max(SCRATCH + 1, hi)
    if tl.atomic_add(SCRATCH + 2, 1) == n_programs - 1:  # acq_rel: every program's extremes are in
        call_lo = tl.atomic_xchg(SCRATCH, lo_init)
        call_hi = tl.atomic_xchg(SCRATCH + 1, hi_init)
        tl.atomic_xchg(SCRATCH + 2, 0)
        bad = (call_lo < 0) | (call_hi >= bound)
        if FIRST:
            before = 1.0
        else:
            before = tl.load(POISON)
        tl.store(POISON, tl.where(bad, float("nan"), before))


def check_range_into(
    ids: Tensor, bound: int, record_row: Tensor, scratch_row: Tensor, poison: Tensor, *, first: bool
) -> Tensor:
    """``ids`` (non-empty, up to 4-D) clamped into [0, bound), contiguous, in their dtype; the
    record row (int64 [min, max]) folded; ``poison`` (0-d float32) set when ``first``, else
    kept NaN or made NaN. ``scratch_row`` (int64 [max, min, 0] between calls) is left so."""
    if not 0 < ids.dim() <= _MAX_DIMS or ids.numel() == 0:
        raise ValueError(f"ids must be a non-empty tensor of 1 to {_MAX_DIMS} dims, got shape {tuple(ids.shape)}")
    if bound < 1:
        raise ValueError(f"bound must be >= 1, got {bound}")
    for name, t, n, dtype in (("record_row", record_row, 2, torch.int64), ("scratch_row", scratch_row, 3, torch.int64),
                              ("poison", poison, 1, torch.float32)):  # fmt: skip
        if t.numel() != n or t.dtype != dtype or not t.is_contiguous() or t.device != ids.device:
            raise ValueError(f"{name} must be {n} contiguous {dtype} on {ids.device}, got {tuple(t.shape)} {t.dtype}")
    pad = _MAX_DIMS - ids.dim()
    sizes = (1,) * pad + tuple(ids.shape)
    strides = (0,) * pad + tuple(ids.stride())
    out = torch.empty(ids.shape, dtype=ids.dtype, device=ids.device)
    n = ids.numel()
    programs = triton.cdiv(n, BLOCK)
    lean(_check_range)[(programs,)](
        ids, out, record_row, scratch_row, poison, n, *sizes[1:], *strides, bound, programs, _I64_MAX, _I64_MIN,
        FIRST=first, BLOCK=BLOCK, num_warps=4,
    )  # fmt: skip
    return out
