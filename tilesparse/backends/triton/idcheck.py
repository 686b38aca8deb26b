"""Given ids checked on the device in one launch per field (``validate=True`` on a GPU).

:func:`tilesparse.patterns.decision_errors.check_on_device` defines the check: clamp the ids
into [0, bound) for the index build, fold their smallest and largest value into the op's error
record, and make the call's poison NaN when any id is out of range (or, for a feature support,
when a token names one feature twice). As torch ops that is about fifteen small launches a
call (a support's sort-based repeat check adds as many again), each a few to tens of
microseconds of host time; these kernels do one field's part in one launch:

- every program clamps its block of ids into the output and folds its block's minimum and
  maximum into the record row and into a scratch row (atomics);
- a support (:func:`check_support_into`, the last dim a token's feature ids) is checked by
  tokens, whole: each program also finds whether one of its tokens repeats a clamped id and
  folds that into the repeat row's scratch;
- the last program to finish (a counter in the scratch row) reads the scratch row's extremes,
  resets the row for the next call (so a CUDA graph replay finds it reset too) and writes the
  call's poison: NaN when the field's ids leave [0, bound) (or repeat), else 1, or the poison
  of the field checked before it in this call (``FIRST`` false), so one 0-d tensor covers every
  field; for a support it also folds the call's repeat flag (0 or 1) into the repeat row.

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

__all__ = ["BLOCK", "MAX_SUPPORT", "SUPPORT_CHECK", "check_range_into", "check_support_into"]

BLOCK = 1024  # ids per program
# the widest support (feature ids per token) checked by a kernel: its repeat check compares
# every pair of a token's ids (k - 1 passes over the token); wider ones keep the torch ops
MAX_SUPPORT = 64
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


@triton.jit
def _check_support(X, OUT, RECORD, SCRATCH, RECORD_REP, SCRATCH_REP, POISON,
                   n_tokens, k, size1, size2, stride0, stride1, stride2, stride3, bound, n_programs, lo_init, hi_init,
                   FIRST: tl.constexpr, TOKENS: tl.constexpr, KPAD: tl.constexpr):
    """Tokens [pid * TOKENS, (pid + 1) * TOKENS) of the support X (B, H, T, k; any strides):
    their ids clamped into the contiguous OUT, RECORD and SCRATCH's [min, max] folded as
    :func:`_check_range` does, and whether a token repeats a clamped id folded into
    SCRATCH_REP's max; the last program folds the call's repeat flag into RECORD_REP and
    writes POISON."""
    tok = tl.program_id(0) * TOKENS + tl.arange(0, TOKENS)
    j = tl.arange(0, KPAD)
    # tokens past the end read the last token again, lanes past k its last id: the extremes
    # need no sentinel, and the repeat check below looks at lanes below k only
    t = tl.minimum(tok, n_tokens - 1).to(tl.int64)
    jj = tl.minimum(j, k - 1).to(tl.int64)
    i2 = t % size2
    i1 = (t // size2) % size1
    i0 = t // (size2 * size1)
    x = tl.load(X + (i0 * stride0 + i1 * stride1 + i2 * stride2)[:, None] + (jj * stride3)[None, :]).to(tl.int64)
    c = tl.minimum(tl.maximum(x, 0), bound - 1)
    live = (tok < n_tokens)[:, None] & (j < k)[None, :]
    tl.store(OUT + t[:, None] * k + j[None, :], c.to(OUT.dtype.element_ty), mask=live)
    lo = tl.min(tl.min(x, 1), 0)
    hi = tl.max(tl.max(x, 1), 0)
    repeats = tl.zeros([TOKENS], dtype=tl.int32)
    for a in range(0, k - 1):  # id a of every token against the ids after it
        at_a = tl.sum(tl.where(j[None, :] == a, c, 0), 1)
        later = (j[None, :] > a) & (j[None, :] < k)
        repeats = tl.maximum(repeats, tl.max(((c == at_a[:, None]) & later).to(tl.int32), 1))
    rep = tl.max(repeats, 0).to(tl.int64)
    tl.atomic_min(RECORD, lo)
    tl.atomic_max(RECORD + 1, hi)
    tl.atomic_min(SCRATCH, lo)
    tl.atomic_max(SCRATCH + 1, hi)
    tl.atomic_max(SCRATCH_REP + 1, rep)
    if tl.atomic_add(SCRATCH + 2, 1) == n_programs - 1:  # acq_rel: every program's part is in
        call_lo = tl.atomic_xchg(SCRATCH, lo_init)
        call_hi = tl.atomic_xchg(SCRATCH + 1, hi_init)
        call_rep = tl.atomic_xchg(SCRATCH_REP + 1, hi_init)
        tl.atomic_xchg(SCRATCH + 2, 0)
        tl.atomic_min(RECORD_REP, call_rep)
        tl.atomic_max(RECORD_REP + 1, call_rep)
        bad = (call_lo < 0) | (call_hi >= bound) | (call_rep > 0)
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
    _check_arguments(ids, bound, record_row=record_row, scratch_row=scratch_row, poison=poison)
    sizes, strides, out = _padded(ids)
    n = ids.numel()
    programs = triton.cdiv(n, BLOCK)
    lean(_check_range)[(programs,)](
        ids, out, record_row, scratch_row, poison, n, *sizes[1:], *strides, bound, programs, _I64_MAX, _I64_MIN,
        FIRST=first, BLOCK=BLOCK, num_warps=4,
    )  # fmt: skip
    return out


def check_support_into(
    ids: Tensor, bound: int, record_row: Tensor, scratch_row: Tensor, repeat_row: Tensor, repeat_scratch: Tensor,
    poison: Tensor, *, first: bool,
) -> Tensor:
    """:func:`check_range_into` for a feature support (the last dim a token's ids, 2 to
    :data:`MAX_SUPPORT` of them) plus its repeat check: the repeat row (int64 [min, max]) folded
    with the call's flag (1 when a token repeats a clamped id, else 0), ``poison`` NaN then too;
    ``repeat_scratch`` (int64 [max, min, 0] between calls) is left so."""
    _check_arguments(ids, bound, record_row=record_row, scratch_row=scratch_row, repeat_row=repeat_row,
                     repeat_scratch=repeat_scratch, poison=poison)  # fmt: skip
    k = ids.shape[-1]
    if not 2 <= k <= MAX_SUPPORT:
        raise ValueError(f"a support's last dim must hold 2 to {MAX_SUPPORT} ids, got {k}")
    sizes, strides, out = _padded(ids)
    tokens = ids.numel() // k
    kpad = triton.next_power_of_2(k)
    per_program = BLOCK // kpad
    programs = triton.cdiv(tokens, per_program)
    lean(_check_support)[(programs,)](
        ids, out, record_row, scratch_row, repeat_row, repeat_scratch, poison, tokens, k, sizes[1], sizes[2], *strides,
        bound, programs, _I64_MAX, _I64_MIN, FIRST=first, TOKENS=per_program, KPAD=kpad, num_warps=4,
    )  # fmt: skip
    return out


class _SupportCheck:
    """:func:`check_support_into` with its width limit
    (:class:`tilesparse.patterns.decision_errors.SupportCheck`)."""

    max_width = MAX_SUPPORT

    def __call__(self, *args, **kwargs) -> Tensor:
        return check_support_into(*args, **kwargs)


SUPPORT_CHECK = _SupportCheck()

def _padded(ids: Tensor) -> tuple[tuple[int, ...], tuple[int, ...], Tensor]:
    """``ids``' sizes and strides padded in front to 4 dims (size 1, stride 0), and the
    contiguous output the kernels clamp them into."""
    pad = _MAX_DIMS - ids.dim()
    out = torch.empty(ids.shape, dtype=ids.dtype, device=ids.device)
    return (1,) * pad + tuple(ids.shape), (0,) * pad + tuple(ids.stride()), out


_ROW_SIZES = {"record_row": (2, torch.int64), "scratch_row": (3, torch.int64), "repeat_row": (2, torch.int64),
              "repeat_scratch": (3, torch.int64), "poison": (1, torch.float32)}  # fmt: skip


def _check_arguments(ids: Tensor, bound: int, **rows: Tensor) -> None:
    if not 0 < ids.dim() <= _MAX_DIMS or ids.numel() == 0:
        raise ValueError(f"ids must be a non-empty tensor of 1 to {_MAX_DIMS} dims, got shape {tuple(ids.shape)}")
    if bound < 1:
        raise ValueError(f"bound must be >= 1, got {bound}")
    for name, t in rows.items():
        n, dtype = _ROW_SIZES[name]
        if t.numel() != n or t.dtype != dtype or not t.is_contiguous() or t.device != ids.device:
            raise ValueError(f"{name} must be {n} contiguous {dtype} on {ids.device}, got {tuple(t.shape)} {t.dtype}")
