"""Sparsity decisions: what a criterion decided for every (batch, query head, token).

Keep and bucket decisions are (B, H, Tq) for queries and (B, H, Tk) for keys; feature supports
are (B, H, T, k) with T the side's length (Tq <= Tk: see ``tilesparse.ir.AttentionInputs``). Key-side decisions
are per *query* head: with grouped-query attention a kv head is shared by several query heads,
and each of them may keep, bucket and order that head's keys differently.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor
from torch._C._functorch import is_functorch_wrapped_tensor
from torch._subclasses.fake_tensor import is_fake

__all__ = ["DECISION_FIELDS", "Decisions", "check_decision_tensor", "check_decisions", "plain_tensor"]

DECISION_FIELDS: tuple[str, ...] = ("q_keep", "k_keep", "q_bucket", "k_bucket", "q_support", "k_support")


@dataclass(frozen=True, eq=False)
class Decisions:
    """Per-token decisions; each field is optional and only the spec's own are allowed.

    - ``q_keep``, ``k_keep``: (B, H, Tq) / (B, H, Tk) bool, False drops the token (QKDrop);
    - ``q_bucket``, ``k_bucket``: (B, H, Tq) / (B, H, Tk) integer bucket ids in [0, buckets) (Hash);
    - ``q_support``, ``k_support``: (B, H, Tq, k) / (B, H, Tk, k) integer feature ids, distinct
      per token (TopKFeatures).
    """

    q_keep: Tensor | None = None
    k_keep: Tensor | None = None
    q_bucket: Tensor | None = None
    k_bucket: Tensor | None = None
    q_support: Tensor | None = None
    k_support: Tensor | None = None

    def trusted(self, spec: object = None) -> Decisions:
        """Mark these decisions as made by ``spec``'s own criteria (already checked, so a call
        with an equal spec skips the value checks that would read them back: a device sync).

        The mark holds for the tensors' contents at this moment: it records each tensor's
        version counter and data pointer, and an in-place edit (or a swapped tensor) ends it."""
        # the field objects the stamp is read from: while every field still holds its object,
        # each is the tensor with real storage it was then, and only its contents need reading
        stamped = tuple(getattr(self, n) for n in DECISION_FIELDS)
        object.__setattr__(self, "_trusted", True)
        object.__setattr__(self, "_trusted_spec", spec)
        object.__setattr__(self, "_stamped", stamped)
        object.__setattr__(self, "_stamp", _stamp(stamped))
        object.__setattr__(self, "_fits", None)
        return self

    @property
    def is_trusted(self) -> bool:
        return getattr(self, "_trusted", False)

    def trusted_for(self, spec: object) -> bool:
        """Whether :meth:`trusted` marked these decisions for ``spec``: another spec's ranges
        (fewer buckets, a smaller k) must still be checked."""
        if not self.is_trusted:
            return False
        own = getattr(self, "_trusted_spec", None)
        if own is not spec and own != spec:
            return False
        stamp = getattr(self, "_stamp", None)
        if stamp is None:
            return False
        stamped = self._stamped
        if any(getattr(self, n) is not t for n, t in zip(DECISION_FIELDS, stamped, strict=True)):
            return False  # a swapped tensor: its contents are not the ones trusted
        return stamp == _contents(stamped)

    def fits(self, key: tuple) -> bool:
        """Whether :meth:`check_decisions`' structural checks (fields, shapes, devices, dtypes)
        passed on these trusted decisions for the call sizes ``key`` (:meth:`fitted`): a
        trusted tensor's shape, device and dtype cannot change while its trust holds."""
        return getattr(self, "_fits", None) == key

    def fitted(self, key: tuple) -> None:
        """Record that the structural checks passed for ``key`` (trusted decisions only)."""
        if self.is_trusted:
            object.__setattr__(self, "_fits", key)

    def present(self) -> frozenset[str]:
        """Names of the fields that hold a tensor."""
        return frozenset(n for n in DECISION_FIELDS if getattr(self, n) is not None)

    def merge(self, other: Decisions) -> Decisions:
        """The union of two decision sets; a field set in both is an error."""
        both = self.present() & other.present()
        if both:
            raise ValueError(f"decisions set twice: {sorted(both)}")
        return replace(self, **{n: getattr(other, n) for n in other.present()})

    def to(self, device: torch.device | str) -> Decisions:
        return Decisions(**{n: None if t is None else t.to(device) for n, t in self.items()})

    def items(self) -> list[tuple[str, Tensor | None]]:
        return [(n, getattr(self, n)) for n in DECISION_FIELDS]

    def __repr__(self) -> str:
        parts = [
            f"{n}={tuple(t.shape)}:{str(t.dtype).removeprefix('torch.')}" if isinstance(t, Tensor) else f"{n}={type(t).__name__}"
            for n, t in self.items()
            if t is not None
        ]
        return f"Decisions({', '.join(parts)})"


assert DECISION_FIELDS == tuple(f.name for f in fields(Decisions)), "DECISION_FIELDS names Decisions' fields in order"


def plain_tensor(t: Tensor) -> bool:
    """A tensor that wraps none (no subclass, functionalization or functorch transform): never
    fake, without :func:`is_fake`'s longer look."""
    return type(t) is Tensor and not torch._is_functional_tensor(t) and not is_functorch_wrapped_tensor(t)


def _contents(stamped: tuple) -> tuple:
    """What the contents of the tensors ``stamped`` (a Decisions' field objects, in
    :data:`DECISION_FIELDS` order) are known by: per field its data pointer, version counter
    (bumped by every in-place write), shape and strides."""
    return tuple(
        (n, t.data_ptr(), t._version, t.shape, t.stride()) for n, t in zip(DECISION_FIELDS, stamped, strict=True) if t is not None
    )


def _stamp(stamped: tuple) -> tuple | None:
    """:func:`_contents` of ``stamped``; None for tensors without real storage (fake tensors
    while tracing, meta tensors), which are never trusted: their data pointers say nothing of
    their contents."""
    for t in stamped:
        if t is not None and (not isinstance(t, Tensor) or t.is_meta or (not plain_tensor(t) and is_fake(t))):
            return None
    return _contents(stamped)


def check_decisions(
    dec: Decisions,
    *,
    needed: frozenset[str],
    batch: int,
    heads: int,
    q_len: int,
    k_len: int,
    head_dim: int,
    device: torch.device,
    buckets: int | None = None,
    support_k: int | None = None,
    values: bool = True,
    device_values: bool = False,
) -> None:
    """Check ``dec`` against what a spec needs and the inputs' sizes (query-side fields have
    ``q_len`` tokens, key-side ones ``k_len``); raise naming the field.

    ``values`` also checks value ranges (bucket ids, feature ids), which reads them back: a
    device sync on GPU (the CPU's check). ``device_values`` (when ``values`` is off) checks the
    ranges on the device instead, without a sync: an out-of-range id then stops the stream with
    a device-side assertion before any index computation reads it (``validate=False`` on a
    GPU). ``validate=True`` on a GPU checks neither here: the caller clamps and records the ids
    on the device (:mod:`tilesparse.patterns.decision_errors`).
    """
    if not isinstance(dec, Decisions):
        raise TypeError(f"decisions must be a tilesparse.Decisions, got {type(dec).__name__}")
    have = dec.present()
    if missing := sorted(needed - have):
        raise ValueError(f"decisions is missing {missing} that the spec needs (it needs {sorted(needed)})")
    if extra := sorted(have - needed):
        raise ValueError(f"decisions has {extra} that the spec does not use (it uses {sorted(needed)})")
    for name in sorted(needed):
        kind = name.split("_")[1]
        t = getattr(dec, name)
        n = q_len if name.startswith("q_") else k_len
        shape: tuple[int, ...] = (batch, heads, n)
        if kind == "support" and isinstance(t, Tensor):
            shape = (batch, heads, n, support_k if support_k is not None else t.shape[-1])
        hi = buckets if kind == "bucket" else head_dim
        check_decision_tensor(
            f"decisions.{name}", t, kind=kind, shape=shape, device=device, hi=hi, values=values,
            device_values=device_values,
        )  # fmt: skip


def check_decision_tensor(
    label: str,
    t: object,
    *,
    kind: str,
    shape: tuple[int, ...],
    device: torch.device,
    hi: int | None,
    values: bool,
    device_values: bool = False,
) -> None:
    """Check one decision tensor: type, shape, device, dtype and (``values``) its value range.

    ``kind`` is "keep" (bool), "bucket" (integers in [0, hi)) or "support" (distinct integer
    feature ids in [0, hi) along the last dimension).
    """
    if not isinstance(t, Tensor):
        raise TypeError(f"{label} must be a torch.Tensor, got {type(t).__name__}")
    if tuple(t.shape) != shape:
        side = "Tk" if ".k_" in label or "k_side" in label else "Tq" if ".q_" in label or "q_side" in label else "T"
        dims = f"(B, H, {side}, k)" if kind == "support" else f"(B, H, {side})"
        raise ValueError(f"{label} must have shape {shape} {dims}, H the query heads; got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{label} is on {t.device}, the inputs are on {device}")
    if kind == "keep":
        if t.dtype != torch.bool:
            raise TypeError(f"{label} must be torch.bool, got {t.dtype}")
        return
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise TypeError(f"{label} must be an integer tensor, got {t.dtype}")
    if t.numel() == 0:
        return
    if not values:
        if device_values:
            ok = t.min() >= 0
            if hi is not None:
                ok = ok & (t.max() < hi)
            torch._assert_async(ok, f"{label} values must lie in [0, {hi}) (checked on the device: validate=False)")
        return
    lo_v, hi_v = int(t.min()), int(t.max())
    if lo_v < 0 or (hi is not None and hi_v >= hi):
        raise ValueError(f"{label} values must lie in [0, {hi}), got [{lo_v}, {hi_v}]")
    if kind == "support" and t.shape[-1] > 1:
        s = t.sort(dim=-1).values
        if bool((s[..., 1:] == s[..., :-1]).any()):
            raise ValueError(f"{label} repeats a feature id within a token's support")
