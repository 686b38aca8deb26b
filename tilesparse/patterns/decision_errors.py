"""Value checks of given decisions on the GPU, without a host synchronization.

On the CPU a bad id in given decisions raises a ``ValueError`` at once, in the call (reading
the ids costs nothing there). On CUDA with ``validate=True`` (the default) reading them back
would stop the host once per call, and a CUDA graph could not capture the call, so there:

- the ids are checked by device ops: per field the smallest and largest id, and for feature
  supports whether a token repeats a feature id; where the op was given an :class:`IdCheck`
  (on CUDA, a Triton kernel: ``tilesparse.backends.id_check_for``), the call's range checks
  (and a support's repeat check), clamps and poison are one launch (two fields a launch)
  instead of about fifteen torch ops a field (thirty for a support);
- the index build reads the ids *clamped* into their range, so an out-of-range id never
  becomes an out-of-bounds access;
- a call whose ids are out of range (or repeat a feature id) returns an output of NaN, and
  NaN flows into the gradient that reaches that output in the backward pass, so it never
  returns plausible wrong numbers;
- the op's error record (one small int64 tensor per op and device) keeps the range of the
  ids given since the last report; a copy of it travels to pinned host memory behind the
  call's work, without a wait;
- the error is raised as a ``ValueError`` that names the field, the expected range and the
  range given (the same message as on the CPU): at the op's next call once that copy has
  landed (polled, never waited for), or at once by :func:`check_errors`, which synchronizes.

Inside a CUDA graph capture nothing is copied or polled: replays update the record on the
device, and :func:`check_errors` after a replay reports. The record and the host copy are
allocated at the op's first checked call: warm up before capturing (CUDA graphs need that
anyway). ``validate=False`` keeps its device-side assertion (``torch._assert_async``): no
clamp, no NaN, but an out-of-range id ends the CUDA context instead of reaching a kernel.

An op's calls check through :class:`BoundChecks`: what depends only on the layout of the given
ids (which fields, their shapes, strides and dtypes, the device), their rows, error record and
the kernel's launch arguments, is worked out at the layout's first call; later calls allocate
the clamped ids and the poison and launch. :func:`unbound_checks` works it all out per call, as
before (A/B timing). Tested on the CPU with the device path forced (``DEFERRED_DEVICES``):
``tests/test_no_host_sync.py``, ``tests/test_nan_containment.py``,
``tests/backends/triton/test_idcheck.py``.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import torch
from torch import Tensor

from .decisions import Decisions
from .device_constants import capturing, outside_graph_pools

__all__ = [
    "DEFERRED_DEVICES",
    "BoundCheck",
    "BoundChecks",
    "DeviceErrors",
    "IdCheck",
    "IdField",
    "Row",
    "check_errors",
    "check_on_device",
    "poisoned",
    "rows_for",
    "unbound_checks",
]

# device types whose validate=True checks run on the device (the CPU raises at once; tests
# add "cpu" to run the device path where it can be counted)
DEFERRED_DEVICES: frozenset[str] = frozenset({"cuda"})

_LIVE: weakref.WeakSet = weakref.WeakSet()
_INT64_MAX = torch.iinfo(torch.int64).max
_INT64_MIN = torch.iinfo(torch.int64).min
_UNBOUND = [False]  # unbound_checks() in force
_LAYOUTS_MAX = 64  # layouts an op keeps bound (sizes that change every call start over past it)


@dataclass(frozen=True)
class Row:
    """One checked property of one field: ``"range"`` (ids in [0, bound)) or ``"distinct"``
    (no feature id twice in a token's support of ``width`` ids)."""

    field: str
    kind: str
    bound: int
    width: int = 0

    @property
    def label(self) -> str:
        return self.field if self.field == "document_ids" else f"decisions.{self.field}"

    def message(self, lo: int, hi: int) -> str:
        if self.kind == "distinct":
            return f"{self.label} repeats a feature id within a token's support"
        return f"{self.label} values must lie in [0, {self.bound}), got [{lo}, {hi}]"

    def violated(self, lo: int, hi: int) -> bool:
        return lo <= hi and (lo < 0 or hi >= self.bound)


def rows_for(dec: Decisions, *, buckets: int | None, head_dim: int) -> tuple[Row, ...]:
    """The rows that check ``dec``'s id fields (keeps have no values to check)."""
    rows = []
    for name, t in dec.items():
        if t is None or t.numel() == 0 or name.endswith("_keep"):
            continue
        if name.endswith("_bucket"):
            rows.append(Row(name, "range", buckets))
        else:
            rows.append(Row(name, "range", head_dim))
            if t.shape[-1] > 1:  # right after its field's range row (check_on_device pairs them)
                rows.append(Row(name, "distinct", 1, t.shape[-1]))
    return tuple(rows)


class IdField(NamedTuple):
    """One field's part of an :class:`IdCheck`: ``ids`` and their bound, the field's record row
    (int64 [min, max], folded) and its scratch row (the check's own: int64 [max, min, 0] before
    and after); a feature support (the last dim a token's ids, 2 to ``IdCheck.max_width`` of
    them) also its repeat row (folded with the call's repeat flag: 1 when a token repeats a
    clamped id, else 0) and that row's scratch."""

    ids: Tensor
    bound: int
    record_row: Tensor
    scratch_row: Tensor
    repeat_row: Tensor | None = None
    repeat_scratch: Tensor | None = None


class IdCheck(Protocol):
    """A call's range checks (and supports' repeat checks) in fewer launches than torch ops
    (``check_ids_into`` of the Triton backend): every field's ids clamped into [0, bound) (new
    tensors, in the fields' order), their rows folded, ``poison`` (0-d float32) set to NaN when
    a field breaks its check, else to 1. ``bind(fields)``: the same check for every call whose
    ids have these fields' layouts (shapes, strides, dtypes, device), worked out once; called
    with the ids (in the fields' order), it gives the clamped ids and a new poison."""

    max_width: int

    def __call__(self, fields: Sequence[IdField], poison: Tensor) -> list[Tensor]: ...

    def bind(self, fields: Sequence[IdField]) -> Callable[[Sequence[Tensor]], tuple[list[Tensor], Tensor]]: ...


class DeviceErrors:
    """One op's error record on one device: per row the smallest and largest value seen since
    the last report (int64 (R, 2); a "distinct" row holds 1 where a support repeated an id),
    and its pinned host copy; ``id_check``: the checks' kernel where the device has one (then
    ``scratch`` holds its per-row state). The kernel checks a call only when it covers every
    row (every support no wider than its ``max_width``); otherwise the torch ops check it all."""

    def __init__(self, owner: str, rows: tuple[Row, ...], device: torch.device, id_check: IdCheck | None = None):
        self.owner, self.rows, self.device = owner, rows, device
        fits = id_check is not None and all(r.width <= id_check.max_width for r in rows)
        self.id_check = id_check if fits else None
        init = [[_INT64_MAX, _INT64_MIN]] * len(rows)

        def make():  # kept across calls (the record is folded into by every call): outside graph pools
            first = torch.tensor(init, dtype=torch.int64, device=device)
            bounds = torch.tensor([r.bound for r in rows], dtype=torch.int64, device=device)
            scratch = torch.tensor([[_INT64_MAX, _INT64_MIN, 0]] * len(rows), dtype=torch.int64, device=device)
            return first, first.clone(), bounds, scratch

        self.init, self.record, self.bounds, self.scratch = outside_graph_pools(device, make)
        self.row_views = [(self.record[i], self.scratch[i]) for i in range(len(rows))]  # made once, not per call
        cuda = device.type == "cuda"
        self.host = torch.empty((len(rows), 2), dtype=torch.int64, pin_memory=cuda)
        self.event = torch.cuda.Event() if cuda else None
        self.pending = False
        _LIVE.add(self)

    def fold(self, ext: Tensor) -> Tensor:
        """Fold one call's (R, 2) [min, max] into the record; the call's 0-d bool verdict."""
        torch.minimum(self.record[:, 0], ext[:, 0], out=self.record[:, 0])
        torch.maximum(self.record[:, 1], ext[:, 1], out=self.record[:, 1])
        return ((ext[:, 0] < 0) | (ext[:, 1] >= self.bounds)).any()

    def publish(self) -> None:
        """Start the record's copy to the host behind the work queued so far (no wait); one
        copy in flight at a time, and none while a CUDA graph is captured."""
        if self.pending or capturing(self.device):
            return
        if self.event is None:
            self.host.copy_(self.record)
        else:
            self.host.copy_(self.record, non_blocking=True)
            self.event.record(torch.cuda.current_stream(self.device))
        self.pending = True

    def poll(self) -> None:
        """Raise the recorded error if the last copy has landed (never waits)."""
        if not self.pending or capturing(self.device):
            return
        if self.event is not None and not self.event.query():
            return
        self.pending = False
        self._raise_if_bad(self.host.numpy().tolist())

    def check(self) -> None:
        """Raise the recorded error, waiting for the device (a synchronization)."""
        if capturing(self.device):
            raise RuntimeError("tilesparse.check_errors() reads the device: call it after the CUDA graph capture")
        self.pending = False
        self._raise_if_bad(self.record.to("cpu").numpy().tolist())

    def _raise_if_bad(self, values: list[list[int]]) -> None:
        bad = [r.message(lo, hi) for r, (lo, hi) in zip(self.rows, values, strict=True) if r.violated(lo, hi)]
        if not bad:
            return
        self.record.copy_(self.init)
        raise ValueError(
            f"{'; '.join(bad)} (in a call of {self.owner} on {self.device}; checked on the device: the call "
            "that met them returned NaN, and the error is raised at the op's next call or by "
            "tilesparse.check_errors())"
        )


def check_on_device(
    tensors: dict[str, Tensor | None], rows: tuple[Row, ...], errors: DeviceErrors
) -> tuple[dict[str, Tensor | None], Tensor]:
    """``tensors`` (by field name) with every id clamped into its row's range, checked on the
    device into ``errors``; and a 0-d float tensor, NaN when this call's ids break a row, else
    1, to multiply the output by (:func:`poisoned`)."""
    if errors.id_check is not None:
        return _check_with_kernel(tensors, rows, errors)
    clamped: dict[str, Tensor] = {}
    los, his = [], []
    for row in rows:
        t = tensors[row.field]
        if row.kind == "range":
            lo, hi = torch.aminmax(t)
            # a bound past the dtype's range clamps nothing above (uint8 ids, 300 buckets)
            clamped[row.field] = t.clamp(0, min(row.bound - 1, torch.iinfo(t.dtype).max))
        else:
            s = clamped.get(row.field, t).sort(dim=-1).values
            lo = hi = (s[..., 1:] == s[..., :-1]).any()
        los.append(lo)
        his.append(hi)
    ext = torch.stack([torch.stack(los), torch.stack(his)], dim=1).to(torch.int64)
    bad = errors.fold(ext)
    errors.publish()
    return {n: clamped.get(n, t) for n, t in tensors.items()}, torch.where(bad, float("nan"), 1.0)


def _check_with_kernel(tensors: dict[str, Tensor | None], rows: tuple[Row, ...], errors: DeviceErrors):
    """:func:`check_on_device` through ``errors.id_check``."""
    poison = torch.empty((), dtype=torch.float32, device=errors.device)
    fields, names = _id_fields(tensors, rows, errors)
    clamped = dict(zip(names, errors.id_check(fields, poison), strict=True))
    errors.publish()
    return {n: clamped.get(n, t) for n, t in tensors.items()}, poison


def _id_fields(tensors: dict[str, Tensor | None], rows: tuple[Row, ...], errors: DeviceErrors):
    """The :class:`IdField` of each range row (a support's with its repeat row, which follows
    it), and their field names."""
    views = errors.row_views
    fields, names = [], []
    for i, row in enumerate(rows):
        if row.kind == "distinct":  # checked with its field's range row, just before it
            continue
        repeats = views[i + 1] if i + 1 < len(rows) and rows[i + 1].kind == "distinct" else ()
        fields.append(IdField(tensors[row.field], row.bound, *views[i], *repeats))
        names.append(row.field)
    return fields, names


class BoundCheck:
    """:func:`check_on_device` for one layout of given ids (which id fields they hold, their
    shapes, strides, dtypes and device) in one op: the rows, the error record (None: no ids to
    check) and, where the record has an :class:`IdCheck`, the check bound to the layout
    (``IdCheck.bind``), all made at the layout's first call. It keeps no ids."""

    __slots__ = ("bound", "errors", "names", "passed", "rows")

    def __init__(self, dec: Decisions, rows: tuple[Row, ...], errors: DeviceErrors | None):
        self.rows, self.errors, self.bound = rows, errors, None
        self.names: tuple[str, ...] = ()
        if errors is not None and errors.id_check is not None:
            fields, names = _id_fields(dict(dec.items()), rows, errors)
            self.bound = errors.id_check.bind(fields)
            self.names = tuple(names)
        self.passed = tuple(n for n, _ in dec.items() if n not in self.names)  # as given (keeps, empty ids)

    def __call__(self, dec: Decisions, spec: object) -> tuple[Decisions, Tensor | None]:
        """``dec`` (of the bound layout) with its ids clamped, checked into the record and
        marked trusted for ``spec``; the call's poison (None: no ids to check)."""
        if self.errors is None or self.bound is None:  # no ids; or torch ops: the record has no kernel
            return _checked_per_call(dec, spec, self.rows, self.errors)
        clamped, poison = self.bound([getattr(dec, n) for n in self.names])
        self.errors.publish()
        fields = {n: getattr(dec, n) for n in self.passed}
        fields.update(zip(self.names, clamped))
        return Decisions(**fields).trusted(spec), poison


class BoundChecks:
    """One op's device checks of given ids, a :class:`BoundCheck` per layout of them (at most
    64, then they start over); ``errors_for(device, rows)``: the op's error record for those
    rows (the same record whichever way a call is checked); ``buckets``: the spec's bucket
    count (None: no buckets)."""

    def __init__(self, errors_for: Callable[[torch.device, tuple[Row, ...]], DeviceErrors], buckets: int | None):
        self.errors_for, self.buckets = errors_for, buckets
        self.by_layout: dict[tuple, BoundCheck] = {}

    def __call__(
        self, dec: Decisions, spec: object, *, head_dim: int, device: torch.device
    ) -> tuple[Decisions, Tensor | None]:
        """``dec`` with its ids clamped, checked on ``device`` into the error record and marked
        trusted for ``spec``; the call's poison (None: no ids to check)."""
        if _UNBOUND[0]:
            return self._unbound(dec, spec, head_dim, device)
        ids = (dec.q_bucket, dec.k_bucket, dec.q_support, dec.k_support)  # the fields rows_for reads
        key = (device, head_dim, *[None if t is None else (t.shape, t.stride(), t.dtype) for t in ids])
        bound = self.by_layout.get(key)
        if bound is None:
            if len(self.by_layout) >= _LAYOUTS_MAX:
                self.by_layout.clear()
            rows = rows_for(dec, buckets=self.buckets, head_dim=head_dim)
            bound = self.by_layout[key] = BoundCheck(dec, rows, self.errors_for(device, rows) if rows else None)
        return bound(dec, spec)

    def _unbound(self, dec: Decisions, spec: object, head_dim: int, device: torch.device):
        """The call worked out anew: rows, record, fields, launch arguments."""
        rows = rows_for(dec, buckets=self.buckets, head_dim=head_dim)
        return _checked_per_call(dec, spec, rows, self.errors_for(device, rows) if rows else None)


def _checked_per_call(
    dec: Decisions, spec: object, rows: tuple[Row, ...], errors: DeviceErrors | None
) -> tuple[Decisions, Tensor | None]:
    """:func:`check_on_device` of ``dec`` into ``errors`` (None: no ids to check), marked
    trusted for ``spec``; the call's poison (None without ids)."""
    if errors is None:
        return dec.trusted(spec), None
    fields, poison = check_on_device(dict(dec.items()), rows, errors)
    return Decisions(**fields).trusted(spec), poison


@contextlib.contextmanager
def unbound_checks() -> Iterator[None]:
    """Inside the block every op works out each call's checks anew (rows, record, fields,
    launch arguments), as before :class:`BoundChecks`: to A/B time the two in one process.
    ``tilesparse.backends.switch.switched_on``'s pattern, written out: ``patterns`` imports no
    other layer."""
    old = _UNBOUND[0]
    _UNBOUND[0] = True
    try:
        yield
    finally:
        _UNBOUND[0] = old


def poisoned(out: Tensor, poison: Tensor | None) -> Tensor:
    """``out`` times the call's poison (NaN when its ids were out of range, else 1: exact), and
    so the same on the way back: the gradient reaching the output is multiplied by it too (a
    loss such as ``out.sum()`` would otherwise send finite gradients through a NaN output)."""
    return out if poison is None else out * poison


def check_errors() -> None:
    """Raise the first error recorded on the device by any op's decision checks (CUDA,
    ``validate=True``) and not yet raised; waits for the device. A no-op when there is none,
    and on the CPU, where errors are raised in the call."""
    for errors in list(_LIVE):
        errors.check()
