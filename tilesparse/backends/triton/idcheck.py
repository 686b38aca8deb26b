"""Given ids checked on the device in one launch per call (``validate=True`` on a GPU).

:func:`tilesparse.patterns.decision_errors.check_on_device` defines the check: clamp the ids
into [0, bound) for the index build, fold their smallest and largest value into the op's error
record, and make the call's poison NaN when any id is out of range (or, for a feature support,
when a token names one feature twice). As torch ops that is about fifteen small launches a
field (a support's sort-based repeat check adds as many again), each a few to tens of
microseconds of host time; :func:`check_ids_into` does a call's fields in one launch (two
fields a launch: a pattern's query and key side):

- each field has its own programs; every program clamps its block of ids into the field's
  output and folds its block's minimum and maximum into the field's record row and scratch
  row (atomics);
- a support (the last dim a token's feature ids) is checked by tokens, whole: each program also
  finds whether one of its tokens repeats a clamped id and folds that into the repeat row's
  scratch;
- the last program to finish (a counter in the first field's scratch row) reads every field's
  scratch extremes, resets those rows for the next call (so a CUDA graph replay finds them reset
  too) and writes the call's poison: NaN when a field's ids leave [0, bound) (or repeat), else
  1, or the poison of the launch before it in this call (``FIRST`` false, a call of more than
  two fields), so one 0-d tensor covers every field; for a support it also folds the call's
  repeat flag (0 or 1) into the repeat row.

The record and scratch rows outlive the call (the op's :class:`DeviceErrors`); the poison is
the call's own. Two calls of one op on two streams at once would share the scratch rows: the
op's calls are expected in stream order, as its error record already assumes.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton
import triton.language as tl
from torch import Tensor

from .launch import Fixed, Site, lean

__all__ = ["BLOCK", "ID_CHECK", "MAX_SUPPORT", "BoundIdCheck", "check_ids_into"]

BLOCK = 1024  # ids per program
# the widest support (feature ids per token) checked by a kernel: its repeat check compares
# every pair of a token's ids (k - 1 passes over the token); wider ones keep the torch ops
MAX_SUPPORT = 64
_MAX_DIMS = 4
_I64_MAX = torch.iinfo(torch.int64).max
_I64_MIN = torch.iinfo(torch.int64).min


@triton.jit
def _range_block(X, OUT, RECORD, SCRATCH, blk, n, size1, size2, size3, stride0, stride1, stride2, stride3, bound,
                 BLOCK: tl.constexpr):
    """Ids [blk * BLOCK, (blk + 1) * BLOCK) of X (up to 4-D, any strides; row-major order)
    clamped into the contiguous OUT; RECORD and SCRATCH's [min, max] folded."""
    offs = blk * BLOCK + tl.arange(0, BLOCK)
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


@triton.jit
def _support_block(X, OUT, RECORD, SCRATCH, SCRATCH_REP, blk, n_tokens, size1, size2, k,
                   stride0, stride1, stride2, stride3, bound, TOKENS: tl.constexpr, KPAD: tl.constexpr):
    """Tokens [blk * TOKENS, (blk + 1) * TOKENS) of the support X (B, H, T, k; any strides):
    their ids clamped into the contiguous OUT, RECORD and SCRATCH's [min, max] folded as
    :func:`_range_block` does, and whether a token repeats a clamped id folded into
    SCRATCH_REP's max."""
    tok = blk * TOKENS + tl.arange(0, TOKENS)
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
    tl.atomic_min(RECORD, lo)
    tl.atomic_max(RECORD + 1, hi)
    tl.atomic_min(SCRATCH, lo)
    tl.atomic_max(SCRATCH + 1, hi)
    tl.atomic_max(SCRATCH_REP + 1, tl.max(repeats, 0).to(tl.int64))


@triton.jit
def _field_block(X, OUT, RECORD, SCRATCH, SCRATCH_REP, blk, n, size1, size2, size3, stride0, stride1, stride2, stride3,
                 bound, KPAD: tl.constexpr, BLOCK: tl.constexpr):
    """One program's block of one field: ids (``KPAD`` 1) or a support's tokens (``KPAD`` its
    padded width; its width is ``size3``)."""
    if KPAD == 1:
        _range_block(X, OUT, RECORD, SCRATCH, blk, n, size1, size2, size3, stride0, stride1, stride2, stride3, bound,
                     BLOCK)  # fmt: skip
    else:
        _support_block(X, OUT, RECORD, SCRATCH, SCRATCH_REP, blk, n, size1, size2, size3, stride0, stride1, stride2,
                       stride3, bound, BLOCK // KPAD, KPAD)  # fmt: skip


@triton.jit
def _field_verdict(RECORD_REP, SCRATCH, SCRATCH_REP, bound, lo_init, hi_init, KPAD: tl.constexpr):
    """The last program's part for one field: its scratch rows read and reset, a support's
    repeat flag folded into RECORD_REP; whether the field's ids break its check."""
    call_lo = tl.atomic_xchg(SCRATCH, lo_init)
    call_hi = tl.atomic_xchg(SCRATCH + 1, hi_init)
    bad = (call_lo < 0) | (call_hi >= bound)
    if KPAD > 1:
        call_rep = tl.atomic_xchg(SCRATCH_REP + 1, hi_init)
        tl.atomic_min(RECORD_REP, call_rep)
        tl.atomic_max(RECORD_REP + 1, call_rep)
        bad = bad | (call_rep > 0)
    return bad


@triton.jit
def _check_ids(X0, OUT0, X1, OUT1,
               RECORD0, SCRATCH0, RECORD_REP0, SCRATCH_REP0, RECORD1, SCRATCH1, RECORD_REP1, SCRATCH_REP1,
               n0, size01, size02, size03, stride00, stride01, stride02, stride03, bound0, programs0,
               n1, size11, size12, size13, stride10, stride11, stride12, stride13, bound1, programs1,
               lo_init, hi_init, POISON,
               FIRST: tl.constexpr, KPAD0: tl.constexpr, KPAD1: tl.constexpr, BLOCK: tl.constexpr):
    """Field 0's programs [0, programs0), then field 1's (``KPAD1`` 0: no field 1); ``KPAD``
    1 for ids, a support's padded width for a support. The last program to finish writes
    POISON. The parameters are a launch site's layout (``launch.Site``): the ids and outputs a
    call brings, the rows a bound check keeps (one ``Fixed`` block), the scalars, the poison
    last."""
    pid = tl.program_id(0)
    if KPAD1 == 0:
        _field_block(X0, OUT0, RECORD0, SCRATCH0, SCRATCH_REP0, pid, n0, size01, size02, size03,
                     stride00, stride01, stride02, stride03, bound0, KPAD0, BLOCK)  # fmt: skip
    elif pid < programs0:
        _field_block(X0, OUT0, RECORD0, SCRATCH0, SCRATCH_REP0, pid, n0, size01, size02, size03,
                     stride00, stride01, stride02, stride03, bound0, KPAD0, BLOCK)  # fmt: skip
    else:
        _field_block(X1, OUT1, RECORD1, SCRATCH1, SCRATCH_REP1, pid - programs0, n1, size11, size12, size13,
                     stride10, stride11, stride12, stride13, bound1, KPAD1, BLOCK)  # fmt: skip
    if tl.atomic_add(SCRATCH0 + 2, 1) == programs0 + programs1 - 1:  # acq_rel: every program's part is in
        tl.atomic_xchg(SCRATCH0 + 2, 0)
        bad = _field_verdict(RECORD_REP0, SCRATCH0, SCRATCH_REP0, bound0, lo_init, hi_init, KPAD0)
        if KPAD1 > 0:
            bad = bad | _field_verdict(RECORD_REP1, SCRATCH1, SCRATCH_REP1, bound1, lo_init, hi_init, KPAD1)
        if FIRST:
            before = 1.0
        else:
            before = tl.load(POISON)
        tl.store(POISON, tl.where(bad, float("nan"), before))


def check_ids_into(fields: Sequence, poison: Tensor) -> list[Tensor]:
    """:class:`~tilesparse.patterns.decision_errors.IdCheck`'s call (``fields``: its
    ``IdField`` tuples, or anything with their attributes): every field's ids clamped into
    [0, bound) (new contiguous tensors, in their dtype), their rows folded, ``poison`` (0-d
    float32) set to NaN when a field's ids leave their range (or a support repeats an id), else
    to 1; two fields a launch, every field checked before the first."""
    if not fields:
        raise ValueError("fields must name at least one field to check")
    for f in fields:
        _check_row("poison", poison, f.ids.device)
    prepared = [_field_args(f) for f in fields]
    outs = [out for out, _, _, _ in prepared]
    kernel = lean(_check_ids)
    for grid, (i, j), rows, scalars, constants in _launches(prepared):
        kernel[grid](fields[i].ids, outs[i], fields[j].ids, outs[j], *rows, *scalars, poison, **constants)
    return outs


def _launches(prepared: list) -> list[tuple[tuple[int], tuple[int, int], tuple, tuple, dict]]:
    """Per launch of :func:`check_ids_into` (two fields a launch): its grid, the indices of its
    two fields in ``prepared`` (:func:`_field_args`), its rows, its scalars before the poison
    and its constants."""
    out = []
    for start in range(0, len(prepared), 2):
        (_, kpad0, rows0, scalars0), *rest = prepared[start : start + 2]
        # no field 1: its tensors are field 0's, never read, and no programs (KPAD1 0)
        _, kpad1, rows1, scalars1 = rest[0] if rest else (None, 0, rows0, (*scalars0[:-1], 0))
        grid = (scalars0[-1] + scalars1[-1],)  # each field's scalars end with its programs
        constants = {"FIRST": start == 0, "KPAD0": kpad0, "KPAD1": kpad1, "BLOCK": BLOCK, "num_warps": 4}
        out.append((grid, (start, start + len(rest)), (*rows0, *rows1), (*scalars0, *scalars1, _I64_MAX, _I64_MIN),
                    constants))  # fmt: skip
    return out


class BoundIdCheck:
    """:func:`check_ids_into` for fields of one layout: the ids' shapes, strides, dtypes and
    device, and the fields' bounds and rows. The fields are checked and their launches worked
    out once, by :meth:`_IdCheck.bind`: a launch site each, its rows one ``Fixed`` block. A
    call allocates the clamped ids and the poison and launches. It keeps the rows, not the ids
    it was bound with."""

    __slots__ = ("device", "launches", "outs")

    def __init__(self, fields: Sequence):
        if not fields:
            raise ValueError("fields must name at least one field to check")
        self.device = fields[0].ids.device
        prepared = [_field_args(f) for f in fields]  # checked here, once
        self.outs = tuple((out.shape, out.dtype) for out, _, _, _ in prepared)
        kernel = lean(_check_ids)
        self.launches = tuple((Site(kernel, grid, constants), i, j, (Fixed(rows),), scalars)
                              for grid, (i, j), rows, scalars, constants in _launches(prepared))  # fmt: skip

    def __call__(self, ids: Sequence[Tensor]) -> tuple[list[Tensor], Tensor]:
        """``ids`` (in the fields' order, each of its field's bound layout: the caller keys by
        it) clamped into new contiguous tensors, the rows folded, and the call's poison (0-d
        float32: NaN when a field breaks its check, else 1)."""
        outs = [torch.empty(shape, dtype=dtype, device=self.device) for shape, dtype in self.outs]
        poison = torch.empty((), dtype=torch.float32, device=self.device)
        for site, i, j, rows, scalars in self.launches:
            site((ids[i], outs[i], ids[j], outs[j]), rows, (*scalars, poison))
        return outs, poison


def _field_args(f) -> tuple[Tensor, int, tuple, tuple]:
    """A field's output, its ``KPAD`` (1 for ids), its rows and its scalars, checked."""
    ids = f.ids
    if not 0 < ids.dim() <= _MAX_DIMS or ids.numel() == 0:
        raise ValueError(f"ids must be a non-empty tensor of 1 to {_MAX_DIMS} dims, got shape {tuple(ids.shape)}")
    if f.bound < 1:
        raise ValueError(f"bound must be >= 1, got {f.bound}")
    support = f.repeat_row is not None or f.repeat_scratch is not None
    rows = ("record_row", "scratch_row") + (("repeat_row", "repeat_scratch") if support else ())
    for name in rows:
        _check_row(name, getattr(f, name), ids.device)
    sizes, strides, out = _padded(ids)
    if support:
        k = ids.shape[-1]
        if not 2 <= k <= MAX_SUPPORT:
            raise ValueError(f"a support's last dim must hold 2 to {MAX_SUPPORT} ids, got {k}")
        kpad = triton.next_power_of_2(k)
        n = ids.numel() // k
        programs = triton.cdiv(n, BLOCK // kpad)
        rep = (f.repeat_row, f.repeat_scratch)
    else:
        kpad, n = 1, ids.numel()
        programs = triton.cdiv(n, BLOCK)
        rep = (f.record_row, f.scratch_row)  # not read
    return out, kpad, (f.record_row, f.scratch_row, *rep), (n, *sizes[1:], *strides, f.bound, programs)


class _IdCheck:
    """:func:`check_ids_into` with its support width limit
    (:class:`tilesparse.patterns.decision_errors.IdCheck`)."""

    max_width = MAX_SUPPORT

    def __call__(self, fields: Sequence, poison: Tensor) -> list[Tensor]:
        return check_ids_into(fields, poison)

    def bind(self, fields: Sequence) -> BoundIdCheck:
        return BoundIdCheck(fields)


ID_CHECK = _IdCheck()


def _padded(ids: Tensor) -> tuple[tuple[int, ...], tuple[int, ...], Tensor]:
    """``ids``' sizes and strides padded in front to 4 dims (size 1, stride 0), and the
    contiguous output the kernels clamp them into."""
    pad = _MAX_DIMS - ids.dim()
    out = torch.empty(ids.shape, dtype=ids.dtype, device=ids.device)
    return (1,) * pad + tuple(ids.shape), (0,) * pad + tuple(ids.stride()), out


_ROW_SIZES = {"record_row": (2, torch.int64), "scratch_row": (3, torch.int64), "repeat_row": (2, torch.int64),
              "repeat_scratch": (3, torch.int64), "poison": (1, torch.float32)}  # fmt: skip


def _check_row(name: str, t: Tensor | None, device: torch.device) -> None:
    n, dtype = _ROW_SIZES[name]
    if t is None or t.numel() != n or t.dtype != dtype or not t.is_contiguous() or t.device != device:
        got = "None" if t is None else f"{tuple(t.shape)} {t.dtype} on {t.device}"
        raise ValueError(f"{name} must be {n} contiguous {dtype} on {device}, got {got}")
